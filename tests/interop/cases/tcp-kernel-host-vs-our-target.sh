# The Linux kernel NVMe/TCP host (this guest) against nvmf-target running on the host machine
# (tests/interop/configs/tcp-host.yaml, started by the runner), reached at $HOST_IP, which
# qemu forwards to the host's 127.0.0.1. The runner checks the target's log afterwards.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:interop-file
T="-t tcp -a $HOST_IP"

# Kernel nvmet semantics: a port's log lists the subsystems linked to that port, itself and
# its referrals. 8009 has no subsystems and refers to the I/O port.
expect "discovery on 8009 lists itself and the referral to 4420" "trsvcid: *4420" nvme discover $T -s 8009
expect "discovery on 4420 lists the subsystem" "subnqn: *$NQN" nvme discover $T -s 4420

for digests in "" "--hdr-digest --data-digest"; do
  echo "== connect ${digests:-without digests}"
  # shellcheck disable=SC2086 # option lists
  run "connect $digests" nvme connect $T -s 4420 -n "$NQN" $digests
  dev=$(wait_nvme "$NQN") || { echo "FAIL: no namespace"; exit 1; }
  expect "nvme list shows the namespace" "/dev/$dev" nvme list
  expect "id-ctrl reports our subsystem" "subnqn +: $NQN" nvme id-ctrl "/dev/$dev"
  expect "id-ns reports the namespace size" "^nsze +: 0x" nvme id-ns "/dev/$dev"
  run "fio verify 4k randrw QD32" fio --name=v4k --filename="/dev/$dev" --rw=randrw --bs=4k --iodepth=32 \
    --size=16M --verify=crc32c --ioengine=libaio --direct=1 --output="$WORK/fio4k"
  run "fio verify 128k randrw QD32" fio --name=v128k --filename="/dev/$dev" --rw=randrw --bs=128k --iodepth=32 \
    --offset=32M --size=32M --verify=crc32c --ioengine=libaio --direct=1 --output="$WORK/fio128k"
  # 4 KiB reads at QD 128: the verify pass reads every block written at the job's depth,
  # so the target's deferred responses (send_queue: released in bursts) carry a deep
  # queue of the kernel host's reads, with and without digests.
  run "fio verify 4k reads QD128" fio --name=v4kq128 --filename="/dev/$dev" --rw=randwrite --bs=4k \
    --iodepth=128 --offset=64M --size=16M --verify=crc32c --ioengine=libaio --direct=1 \
    --output="$WORK/fio4kq128"
  grep -hE 'err=|IOPS=' "$WORK/fio4k" "$WORK/fio128k" "$WORK/fio4kq128"
  run "disconnect" nvme disconnect -n "$NQN"
done

echo "== a filesystem across a reconnect"
run "connect" nvme connect $T -s 4420 -n "$NQN"
dev=$(wait_nvme "$NQN") || { echo "FAIL: no namespace"; exit 1; }
run "mkfs.ext4" mkfs.ext4 -q -F "/dev/$dev"
mkdir -p "$WORK/mnt"
run "mount" mount "/dev/$dev" "$WORK/mnt"
for i in 1 2 3 4; do
  run "write file $i" dd if=/dev/urandom of="$WORK/mnt/file$i" bs=64k count=$((i * 16)) status=none
done
(cd "$WORK/mnt" && sha256sum file*) > "$WORK/sums"
cat "$WORK/sums"
run "umount" umount "$WORK/mnt"
run "disconnect" nvme disconnect -n "$NQN"
run "reconnect" nvme connect $T -s 4420 -n "$NQN"
dev=$(wait_nvme "$NQN") || { echo "FAIL: no namespace after reconnect"; exit 1; }
run "mount again" mount "/dev/$dev" "$WORK/mnt"
run "checksums match after reconnect" sh -c "cd $WORK/mnt && sha256sum -c $WORK/sums"
run "umount" umount "$WORK/mnt"
run "disconnect" nvme disconnect -n "$NQN"
echo "kernel host vs our TCP target: all checks passed"
