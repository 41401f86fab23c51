# The Linux kernel NVMe/RDMA host (nvme-rdma) in this guest against nvmf-target on real verbs
# (rdma-sys on rxe0, soft-RoCE), configured from configs/rdma.yaml with the guest's address and
# a file namespace: nvme discover (discovery on the I/O port), connect, list, id-ctrl, id-ns,
# fio --verify=crc32c random read/write at 4 KiB (QD 32) and 128 KiB (QD 8), disconnect; the
# target's log must hold no error, warning or panic.
# The target runs with shared receive queues on (rdma.srq: true, the default, spelled out in
# configs/rdma.yaml): its poll group posts capsule receives to one SRQ on rxe0 and every queue
# of the kernel host (admin and I/O) takes its receives from it; the case checks the target
# logged the SRQ, i.e. it did not fall back to per-queue receives.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:ram0
run "backing file" truncate -s 128M "$WORK/disk.img"
run "config from configs/rdma.yaml" sh -c "sed -E -e 's|traddr: [0-9.]+|traddr: $GUEST_IP|' \
  -e 's|device_path: \"ram:1G\"|device_path: $WORK/disk.img|' '$INTEROP/../../configs/rdma.yaml' > '$WORK/rdma.yaml'"
check "the config names the guest address and the file" "grep -q 'traddr: $GUEST_IP' '$WORK/rdma.yaml' && grep -q '$WORK/disk.img' '$WORK/rdma.yaml'"
start_bg target "$BIN/nvmf-target" --config "$WORK/rdma.yaml"
run "target listens on rxe0" wait_log target "port 1 rdma at $GUEST_IP:4420"
check "the config keeps shared receive queues on" "grep -q 'srq: true' '$WORK/rdma.yaml'"
run "the poll group receives through a shared receive queue" wait_log target "shared receive queue posted"
expect "discover (discovery served on 4420)" "subnqn: *$NQN" nvme discover -t rdma -a "$GUEST_IP" -s 4420
run "connect" nvme connect -t rdma -a "$GUEST_IP" -s 4420 -n "$NQN"
DEV=$(wait_nvme "$NQN") || { echo "FAIL: no namespace disk for $NQN"; exit 1; }
expect "nvme list shows the namespace" "/dev/$DEV .*nvmf-rs" nvme list
expect "id-ctrl" "subnqn +: $NQN" nvme id-ctrl "/dev/$DEV"
expect "id-ns" "nsze +: 0x" nvme id-ns "/dev/$DEV"
for spec in "4k 32" "128k 8"; do
  set -- $spec
  expect "fio randrw bs=$1 iodepth=$2 verify=crc32c" "err= 0" fio --name="rdma-$1" --filename="/dev/$DEV" \
    --rw=randrw --bs="$1" --iodepth="$2" --size=16M --ioengine=libaio --direct=1 \
    --verify=crc32c --verify_fatal=1
done
expect "disconnect" "disconnected 1 controller" nvme disconnect -n "$NQN"
stop_bg target
log_clean target
echo "kernel RDMA host vs our target: all checks passed"
