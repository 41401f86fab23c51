#!/bin/sh
# initrd.sh KDIR OUT: builds a small initramfs for the interop guest.
#
# KDIR is vm/kernel.sh's folder: the kernel release K in KDIR/release, its modules under
# KDIR/root/usr/lib/modules/K. The guest has no disk. Its init loads the virtio/9p/overlay
# modules of K, mounts this machine's root (9p tag "hostroot", read-only) as the lower layer of
# an overlay whose upper layer is tmpfs, bind-mounts KDIR's modules at /lib/modules/K (this
# machine has no such kernel installed), mounts the 9p tag "out" read-write at /vmout, switches root and runs
# /vmout/job.sh as root with its output in /vmout/job.log; the last line of that log is
# "job exit N". Then it powers the guest off. /tmp is left as it is (the host's, through the
# overlay): a checkout under /tmp must stay visible in the guest.
set -eu
KDIR=$1
OUT=$2
K=$(cat "$KDIR/release")
MODDIR=$KDIR/root/usr/lib/modules/$K
[ -d "$MODDIR" ] || { echo "initrd.sh: no modules at $MODDIR (run vm/kernel.sh)" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/bin" "$W/lib/modules" "$W/proc" "$W/sys" "$W/dev" "$W/ro" "$W/rw" "$W/root"
cp /bin/busybox "$W/bin/busybox"
for tool in sh mount mkdir insmod switch_root echo cat sleep; do ln -s busybox "$W/bin/$tool"; done
# Order matters: each module after the ones it depends on. fscache is built into netfs on 6.12.
MODS="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p overlay"
for m in $MODS; do
  f=$(modinfo -b "$KDIR/root" -k "$K" -n "$m" 2>/dev/null) || continue
  case $f in
    *.ko) cp "$f" "$W/lib/modules/$m.ko" ;;
    *.ko.xz) xz -dc "$f" > "$W/lib/modules/$m.ko" ;;
    *.ko.zst) zstd -dc "$f" > "$W/lib/modules/$m.ko" ;;
    *) ;; # built in
  esac
done
cat > "$W/init" <<INIT
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $MODS; do [ -f /lib/modules/\$m.ko ] && insmod /lib/modules/\$m.ko; done
fail() { echo "interop init: \$1"; echo o > /proc/sysrq-trigger; sleep 5; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 hostroot /ro || fail "9p root"
mount -t tmpfs -o size=1g tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work /root || fail "overlay"
mkdir -p /root/lib/modules/$K
mount -o bind /root$MODDIR /root/lib/modules/$K || fail "modules of $K"
mkdir -p /root/vmout
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 out /root/vmout || fail "out share"
for d in proc sys dev; do mount --move /\$d /root/\$d; done
exec switch_root /root /bin/sh -c '
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  mount -t tmpfs tmpfs /run
  mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
  sh /vmout/job.sh >> /vmout/job.log 2>&1
  echo "job exit \$?" >> /vmout/job.log
  sync
  echo o > /proc/sysrq-trigger
  sleep 30'
INIT
chmod +x "$W/init"
mkdir -p "$(dirname "$OUT")"
(cd "$W" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
