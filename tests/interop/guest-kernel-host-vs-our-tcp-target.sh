# The Linux kernel NVMe/TCP host (in the guest) against nvmf-target running on the host
# machine, reached at 10.0.2.100 (forwarded to the host's 127.0.0.1).
set -x
. /vmout/guest-net.sh
NQN=nqn.2024-01.io.nvmf-rs:ram0
nvme discover -t tcp -a 10.0.2.100 -s 8009 || exit 1
nvme discover -t tcp -a 10.0.2.100 -s 4420 || exit 1
for opts in "" "--hdr-digest --data-digest"; do
  nvme connect -t tcp -a 10.0.2.100 -s 4420 -n $NQN $opts || exit 1
  for i in $(seq 100); do [ "$(cat /sys/block/nvme0n1/size 2>/dev/null || echo 0)" -gt 0 ] && break; sleep 0.2; done
  nvme list || exit 1
  nvme id-ctrl /dev/nvme0 | head -40 || exit 1
  nvme id-ns /dev/nvme0n1 | head -12 || exit 1
  fio --name=v4k --filename=/dev/nvme0n1 --rw=randrw --verify=crc32c --bs=4k --size=32M --iodepth=32 --ioengine=libaio --direct=1 || exit 1
  fio --name=v128k --filename=/dev/nvme0n1 --rw=randrw --verify=crc32c --bs=128k --size=32M --iodepth=8 --ioengine=libaio --direct=1 || exit 1
  nvme disconnect-all || exit 1
done
echo KERNEL-HOST-INTEROP-OK
