# nvmf-initiator against the Linux kernel's NVMe/TCP target (nvmet-tcp, set up through configfs)
# in this guest: discover, identify, write then read back and compare, perf with verification,
# perf with header and data digests, and 128 KiB writes with verification and digests (R2T:
# our host sends the H2CData from the command's buffer, the digest over it in place).
. "$INTEROP/lib.sh"
NQN=nqn.2014-08.org.example:kernel-tcp
I="$BIN/nvmf-initiator"
C="-t tcp -a $GUEST_IP -s 4420"
run "backing file" truncate -s 256M "$WORK/disk.img"
run "kernel target (configfs)" kernel_target_add tcp "$GUEST_IP" 4420 "$NQN" "$WORK/disk.img"
expect "discover" "subnqn: *$NQN" $I discover $C
expect "identify" "subnqn.*$NQN" $I identify $C -n $NQN
# nvmet takes the block size of a file namespace from its filesystem: 4 KiB on tmpfs.
expect "namespace 1 has 4 KiB blocks" "lbads:12" $I identify $C -n $NQN --nsid 1
run "test data" dd if=/dev/urandom of="$WORK/data" bs=4096 count=64 status=none
run "write" "$I" write $C -n "$NQN" --nsid 1 --lba 512 --count 64 --input "$WORK/data"
run "read back" "$I" read $C -n "$NQN" --nsid 1 --lba 512 --count 64 --output "$WORK/back"
run "what was read is what was written" cmp "$WORK/data" "$WORK/back"
expect "perf randwrite with verification" "errors=0" $I perf $C -n $NQN --rw randwrite --bs 4k --iodepth 16 --runtime 5 --size 16M --verify
expect "perf randread with digests" "errors=0" $I perf $C -n $NQN --rw randread --bs 128k --iodepth 4 --runtime 5 --hdr-digest --data-digest
expect "perf 128k randwrite with verification and digests" "errors=0" $I perf $C -n $NQN --rw randwrite --bs 128k \
  --iodepth 8 --runtime 5 --size 64M --verify --hdr-digest --data-digest
echo "our host vs kernel TCP target: all checks passed"
