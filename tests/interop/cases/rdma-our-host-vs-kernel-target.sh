# nvmf-initiator on real verbs (rdma-sys on rxe0) against the Linux kernel's NVMe/RDMA target
# (nvmet-rdma, set up through configfs) in this guest: discover, identify, write then read back
# and compare (in-capsule and keyed-SGL sizes), and perf runs with verification.
. "$INTEROP/lib.sh"
NQN=nqn.2014-08.org.example:kernel-rdma
I="$BIN/nvmf-initiator"
C="-t rdma -a $GUEST_IP -s 4420"
run "backing file" truncate -s 256M "$WORK/disk.img"
run "kernel target (configfs)" kernel_target_add rdma "$GUEST_IP" 4420 "$NQN" "$WORK/disk.img"
expect "discover" "subnqn: *$NQN" $I discover $C
expect "identify" "subnqn.*$NQN" $I identify $C -n $NQN
expect "namespace 1 has 4 KiB blocks" "lbads:12" $I identify $C -n $NQN --nsid 1
# 1 block fits the kernel target's in-capsule data; 64 blocks (256 KiB) move by RDMA READ/WRITE.
for n in 1 64; do
  run "test data ($n blocks)" dd if=/dev/urandom of="$WORK/data$n" bs=4096 count=$n status=none
  run "write $n blocks" "$I" write $C -n "$NQN" --nsid 1 --lba 512 --count $n --input "$WORK/data$n"
  run "read back $n blocks" "$I" read $C -n "$NQN" --nsid 1 --lba 512 --count $n --output "$WORK/back$n"
  run "what was read is what was written ($n blocks)" cmp "$WORK/data$n" "$WORK/back$n"
done
expect "perf randwrite 4k with verification" "errors=0" $I perf $C -n $NQN --rw randwrite --bs 4k --iodepth 16 --runtime 5 --size 16M --verify
expect "perf randrw 128k with verification" "errors=0" $I perf $C -n $NQN --rw randrw --bs 128k --iodepth 4 --runtime 5 --size 16M --verify
echo "our host vs kernel RDMA target: all checks passed"
