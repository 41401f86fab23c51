# nvmf-initiator against nvmf-target, both on real verbs (rdma-sys) over rxe0 in this guest:
# discover, identify, write/read/compare at in-capsule and RDMA READ/WRITE sizes, and verifying
# perf runs; the target's log must hold no error, warning or panic.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:guest-rdma
I="$BIN/nvmf-initiator"
C="-t rdma -a $GUEST_IP -s 4420"
start_bg target "$BIN/nvmf-target" --transport rdma --listen "$GUEST_IP:4420" --nqn "$NQN" --namespace ram:256M
run "target listens on rxe0" wait_log target "port 1 rdma at $GUEST_IP:4420"
expect "discover" "subnqn: *$NQN" $I discover $C
expect "identify" "subnqn.*$NQN" $I identify $C -n $NQN
# The RAM namespace has 512-byte blocks: 16 blocks (8 KiB) travel in the capsule, 256 blocks
# (128 KiB) by RDMA READ (write) and RDMA WRITE (read).
for n in 16 256; do
  run "test data ($n blocks)" dd if=/dev/urandom of="$WORK/data$n" bs=512 count=$n status=none
  run "write $n blocks" "$I" write $C -n "$NQN" --nsid 1 --lba 100 --count $n --input "$WORK/data$n"
  run "read back $n blocks" "$I" read $C -n "$NQN" --nsid 1 --lba 100 --count $n --output "$WORK/back$n"
  run "compare ($n blocks)" cmp "$WORK/data$n" "$WORK/back$n"
done
expect "perf randrw 4k with verification" "errors=0" $I perf $C -n $NQN --rw randrw --bs 4k --iodepth 16 --runtime 3 --size 16M --verify
expect "perf randrw 128k with verification" "errors=0" $I perf $C -n $NQN --rw randrw --bs 128k --iodepth 4 --runtime 3 --size 16M --verify
stop_bg target
log_clean target
echo "our host vs our target over real verbs: all checks passed"
