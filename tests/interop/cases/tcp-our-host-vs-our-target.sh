# nvmf-initiator against nvmf-target over NVMe/TCP inside the guest (the same binaries as on the
# host, on the guest kernel's network stack): write/read/compare and a verifying perf run.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:guest-tcp
I="$BIN/nvmf-initiator"
C="-t tcp -a $GUEST_IP -s 4420"
start_bg target "$BIN/nvmf-target" --transport tcp --listen "$GUEST_IP:4420" --nqn "$NQN" --namespace ram:256M
wait_port "$GUEST_IP" 4420
run "test data" dd if=/dev/urandom of="$WORK/data" bs=4096 count=32 status=none
run "write" "$I" write $C -n "$NQN" --nsid 1 --lba 100 --count 256 --input "$WORK/data"
run "read back" "$I" read $C -n "$NQN" --nsid 1 --lba 100 --count 256 --output "$WORK/back"
run "compare" cmp "$WORK/data" "$WORK/back"
expect "perf with verification" "errors=0" $I perf $C -n $NQN --rw randwrite --bs 4k --iodepth 16 --runtime 3 --size 16M --verify
stop_bg target
log_clean target
echo "our host vs our TCP target in the guest: all checks passed"
