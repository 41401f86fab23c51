#!/bin/sh
# boot.sh JOB OUTDIR: boots the 6.12 kernel (vm/kernel.sh) under qemu, runs JOB as root inside the guest and
# exits 0 only when JOB did. OUTDIR is the guest's /vmout (read-write): JOB is copied there as
# job.sh, its output lands in OUTDIR/job.log, qemu's console in OUTDIR/console.log.
#
# The guest sees this machine's root read-only (with a tmpfs overlay), so binaries built here run
# inside unchanged. Networking is qemu user mode with restrict=on (nothing leaves the machine)
# plus explicit bridges:
#   guest 10.0.2.100:P  -> this machine's 127.0.0.1:P          P in $INTEROP_GUESTFWD (4420 8009)
#   this machine's 127.0.0.1:(10000+P) -> guest port P       P in $INTEROP_HOSTFWD  (none)
# Env: INTEROP_TIMEOUT (s, 1800), INTEROP_MEM (MiB, 3072), INTEROP_CPUS (2), INTEROP_ACCEL,
# INTEROP_DEVICES (more qemu arguments: emulated devices, e.g. an NVMe SSD).
# TCG by default: on these machines /dev/kvm exists but a guest hangs at boot under it.
set -eu
JOB=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/nvmf-interop
# The guest's kernel, unpacked privately (vm/kernel.sh; nothing is installed on this machine).
KDIR=$CACHE/kernel
K=$("$HERE/kernel.sh" "$KDIR")
VMLINUZ=$KDIR/root/boot/vmlinuz-$K
[ -r "$VMLINUZ" ] || { echo "$VMLINUZ missing" >&2; exit 2; }
INITRD=$CACHE/initrd-$K.img
if [ ! -f "$INITRD" ] || [ "$HERE/initrd.sh" -nt "$INITRD" ]; then
  "$HERE/initrd.sh" "$KDIR" "$INITRD"
fi
mkdir -p "$OUT"
cp "$JOB" "$OUT/job.sh"
rm -f "$OUT/job.log"
NET="user,id=net0,restrict=on"
for p in ${INTEROP_GUESTFWD-4420 8009}; do
  NET="$NET,guestfwd=tcp:10.0.2.100:$p-cmd:busybox nc 127.0.0.1 $p"
done
for p in ${INTEROP_HOSTFWD-}; do
  NET="$NET,hostfwd=tcp:127.0.0.1:$((10000 + p))-:$p"
done
# shellcheck disable=SC2086 # INTEROP_ACCEL and INTEROP_DEVICES are lists of qemu arguments
timeout "${INTEROP_TIMEOUT:-1800}" qemu-system-x86_64 ${INTEROP_ACCEL:--accel tcg,thread=multi -cpu max} \
  -m "${INTEROP_MEM:-3072}" -smp "${INTEROP_CPUS:-2}" -nographic -no-reboot \
  -kernel "$VMLINUZ" -initrd "$INITRD" -append "console=ttyS0 quiet panic=-1" \
  -fsdev local,id=hostroot,path=/,security_model=none,readonly=on \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev local,id=out,path="$OUT",security_model=none -device virtio-9p-pci,fsdev=out,mount_tag=out \
  -netdev "$NET" -device virtio-net-pci,netdev=net0 ${INTEROP_DEVICES:-} > "$OUT/console.log" 2>&1 || true
[ -f "$OUT/job.log" ] || { echo "the guest left no job.log; see $OUT/console.log" >&2; exit 3; }
tail -n 1 "$OUT/job.log" | grep -q '^job exit 0$'
