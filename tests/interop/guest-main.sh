# Runs inside the guest as /vmout/job.sh (see vm/boot.sh). Brings up the guest side of the lab,
# then runs each case named in /vmout/cases (one absolute path a line) in a clean environment
# and records "PASS name seconds" or "FAIL name seconds" in /vmout/results.
# /vmout/env holds the variables the host runner passes in (INTEROP, BIN, TRIXIE).
. /vmout/env
export INTEROP BIN TRIXIE GUEST_IP=10.0.2.15 HOST_IP=10.0.2.100
echo "== guest: $(uname -r), $(nproc) cpus"
modprobe virtio_net
ip link set lo up
ip link set eth0 up
ip addr add "$GUEST_IP/24" dev eth0
ip route add default via 10.0.2.2
# The kernel's default hostname "(none)" is no valid CRUSH name: a Ceph OSD puts the hostname
# in its CRUSH location and refuses to boot with it (case rbd-kernel-multipath). Named in
# /etc/hosts so a lookup of it never waits for a DNS server the guest cannot reach.
echo interop-guest > /proc/sys/kernel/hostname
grep -q "$GUEST_IP" /etc/hosts || echo "$GUEST_IP interop-guest" >> /etc/hosts
for m in rdma_rxe rdma_ucm nvmet nvmet-tcp nvmet-rdma nvme-tcp nvme-rdma ublk_drv nbd tls; do
  modprobe "$m" || echo "modprobe $m failed"
done
rdma link add rxe0 type rxe netdev eth0 || echo "rxe0 not created"
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
# Backing files live on tmpfs: on the 9p overlay a file reports 1-byte blocks to nvmet.
mkdir -p /scratch
mount -t tmpfs -o size=1200m tmpfs /scratch
: > /vmout/results
: > /vmout/kernel-bugs
while read -r case; do
  [ -n "$case" ] || continue
  name=$(basename "$case" .sh)
  WORK=/scratch/$name
  LOG=/vmout/logs/$name
  mkdir -p "$WORK" "$LOG"
  echo "== case $name"
  start=$(date +%s)
  klines=$(dmesg | wc -l)
  if WORK=$WORK LOG=$LOG sh "$case" < /dev/null; then verdict=PASS; else verdict=FAIL; fi
  secs=$(( $(date +%s) - start ))
  echo "== case $name: $verdict (${secs}s)"
  # The kernel's log during the case, whole (the console shows only alerts): a kernel bug
  # our binaries run into is then tied to its case, with its page dump and call trace.
  dmesg | tail -n +"$((klines + 1))" > "$LOG/kernel.log"
  if grep -qE 'BUG:|Bad page state|WARNING:|Oops|general protection' "$LOG/kernel.log"; then
    echo "== case $name: the kernel reported a bug, see logs/$name/kernel.log"
    echo "$name" >> /vmout/kernel-bugs
  fi
  echo "$verdict $name $secs" >> /vmout/results
  # Whatever a case left behind must not leak into the next one.
  nvme disconnect-all > /dev/null 2>&1
  for p in "$LOG"/*.pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  # Also whatever a case started by hand: a leftover host would reconnect to the next target.
  pkill -9 -f "^$BIN/" 2>/dev/null
  sleep 1
  sh -c ". $INTEROP/lib.sh; kernel_target_clear" > /dev/null 2>&1
  rm -rf "$WORK"
done < /vmout/cases
dmesg | grep -iE 'nvme|rdma|rxe|ublk|nbd' | tail -n 40 > /vmout/dmesg.txt
! grep -q '^FAIL' /vmout/results
