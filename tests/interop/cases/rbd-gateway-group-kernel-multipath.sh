# A gateway group (issue 27) under the kernel's native multipath: a private Ceph cluster runs in
# the guest (scripts/ceph-test-cluster: one monitor, one memstore OSD on 127.0.0.1) and three
# nvmf-target processes gw-a, gw-b, gw-c are the gateways of group g1 (each its own file with a
# `gateway_group:` section, disjoint controller ids; the group's state in the pool `rbd`).
# Everything else is added with `ctl` on gw-a: one subsystem, namespace 1 on rbd/img and
# namespace 2 on rbd/img2, which the group places in different gateways' home ANA groups; each
# gateway adds its own listener (ports 4420, 4421, 4422). The kernel host connects to all three:
# per namespace, the path through its ANA group's owner is optimized, the others non-optimized.
# A verifying fio job writes both namespaces while the owner of namespace 1 is killed with
# SIGKILL and, once another gateway took its ANA group, started again. Nothing else is typed: the
# survivors see its beat stop, one takes its group after the lease (fencing its RADOS client),
# the kernel follows the ANA change notice, and the restarted gateway gets its group back after
# the failback delay. fio finishes without an error, every block read back.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:gateway-group
T="$BIN/nvmf-target"
CLUSTER="$INTEROP/../../scripts/ceph-test-cluster"
CEPH=$WORK/ceph
CONF=$CEPH/ceph.conf
IMAGE_MB=64
# Each of the two jobs covers half of its image: through librbd under TCG writes run at 100 to
# 250 IOPS per namespace, so namespace 1 is written for ~70 s (its owner dies ~7 s in, the
# failback comes ~20 s after that) before the read-back.
FIO_MB=32
# The group's timing: the default lease (a dead owner's group moves 5 to 6.7 s after its last
# renewal) and a failback 10 s after the restarted gateway beats again.
LEASE_MS=5000
FAILBACK_MS=10000
GATEWAYS="gw-a gw-b gw-c"
# Plain logs: the case greps the gateways' log fields (tracing colours them otherwise).
export NO_COLOR=1

# Whatever ends the case: the gateways (the restarted one too) go before the cluster they are
# clients of, the Ceph logs are kept, the daemons stopped.
cleanup() {
  for _p in "$LOG"/gw-*.pid; do
    [ -f "$_p" ] && kill -KILL "$(cat "$_p")" 2>/dev/null
    rm -f "$_p"
  done
  [ -d "$CEPH/log" ] && cp -r "$CEPH/log" "$LOG/ceph-log"
  "$CLUSTER" stop "$CEPH" > /dev/null 2>&1
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# port_of GATEWAY: its listener's TCP port (and portid: 1, 2, 3).
port_of() { case $1 in gw-a) echo 4420 ;; gw-b) echo 4421 ;; gw-c) echo 4422 ;; esac; }
portid_of() { echo $(( $(port_of "$1") - 4419 )); }

# gw_cfg NAME CNTLID_MIN: writes $WORK/NAME.yaml, the gateway's own file: nothing but the group
# section and the transport's stuck-command bound. stuck_command_ms: the new owner's first
# writes wait in librbd for the dead owner's exclusive lock until the OSD expires its watch
# (15 s, below; the group's fence covers the group's client, not yet the images'): the bound is
# raised above that, under the kernel host's 30 s I/O timeout.
gw_cfg() {
  cat > "$WORK/$1.yaml" <<EOF
transport: { stuck_command_ms: 25000 }
gateway_group:
  name: g1
  gateway: $1
  ceph_conf: $CONF
  pool: rbd
  cntlid_min: $2
  cntlid_max: $(($2 + 98))
  lease_ms: $LEASE_MS
  failback_delay_ms: $FAILBACK_MS
EOF
}

# start_gw NAME LOGNAME: starts gateway NAME (log and pid file LOGNAME).
start_gw() { start_bg "$2" "$T" --config "$WORK/$1.yaml" --ctl-socket "$WORK/$1.sock"; }

# ctl_on NAME ARGS...: `nvmf-target ctl` on gateway NAME.
ctl_on() { _g=$1; shift; "$T" ctl --socket "$WORK/$_g.sock" "$@"; }

# status_of NAME: its `ctl status` (empty while it is down).
status_of() { ctl_on "$1" status 2> /dev/null; }

# owned NAME: the ANA groups it owns, e.g. "1" or "1, 3" (nothing: none or down).
owned() { status_of "$1" | sed -n 's/^group ANA groups owned: \[\(.*\)\]$/\1/p'; }

# home NAME: its home ANA group, from the group's member list.
home() { status_of "$1" | sed -n "s/^group gateways: .*$1 (home ANA group \\([0-9]*\\)).*/\\1/p"; }

# owns NAME GRPID: whether it owns that ANA group now.
owns() { case ", $(owned "$1"), " in *", $2, "*) return 0 ;; esac; return 1; }

# wait_gw NAME SECS: waits until NAME answers as a gateway of g1 and owns exactly its home group.
wait_gw() {
  _n=$(( $2 * 2 ))
  while [ "$_n" -gt 0 ]; do
    _h=$(home "$1")
    [ -n "$_h" ] && [ "$(owned "$1")" = "$_h" ] && return 0
    sleep 0.5
    _n=$((_n - 1))
  done
  status_of "$1"
  return 1
}

# anagrp NSID: the ANA group the group placed namespace NSID in (gw-a's `ctl export`).
anagrp() {
  ctl_on gw-a export | awk -v n="$1" '/^  - nsid: / { cur = $3 } cur == n && /^    anagrpid: / { print $2; exit }'
}

# gateway_of GRPID: the gateway whose home group GRPID is.
gateway_of() { for _g in $GATEWAYS; do [ "$(home "$_g")" = "$1" ] && { echo "$_g"; return 0; }; done; return 1; }

# ana_of GATEWAY NSID: the kernel's ANA state of namespace NSID's path through that gateway.
ana_of() { cat "/sys/block/$(path_of "$(port_of "$1")" "$2")/ana_state" 2>/dev/null; }

# ctrl_state GATEWAY: the kernel's state of its controller through that gateway (live, connecting..).
ctrl_state() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    grep -q "trsvcid=$(port_of "$1")" "$_c/address" 2>/dev/null && { cat "$_c/state"; return 0; }
  done
  return 1
}

# ctrl_name GATEWAY: the kernel's controller (nvmeX) through that gateway.
ctrl_name() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    grep -q "trsvcid=$(port_of "$1")" "$_c/address" 2>/dev/null && { basename "$_c"; return 0; }
  done
  return 1
}

# kernel_ms MARK CTRL GRPID STATE: ms from the case's mark MARK (see mark) to the kernel's first
# "CTRL: ANA group GRPID: STATE." after it, by the kernel log's clock; empty without dynamic debug.
# (The sysfs polls of this case fork a few processes each: under TCG and load they lag by up to
# a few seconds, the kernel log does not.)
kernel_ms() {
  dmesg | awk -v m="interop mark: $1 at" -v l="$2: ANA group $3: $4." '
    { t = substr($0, 2, index($0, "]") - 2) + 0 }
    index($0, m) { mt = t; seen = 1; next }
    seen && index($0, l) { printf "%d\n", (t - mt) * 1000; exit }'
}

# ana_table: one line per namespace, the ANA state of each path.
ana_table() {
  for _ns in 1 2; do
    _l="nsid $_ns:"
    for _g in $GATEWAYS; do _l="$_l $_g=$(ana_of "$_g" "$_ns")"; done
    echo "$_l"
  done
}

# locker IMAGE: the address of the client holding the image's exclusive lock (empty: none).
locker() {
  timeout 60 rbd -c "$CONF" lock ls "rbd/$1" 2>/dev/null | awk '/^client\./ { print $NF }'
}

check "native multipath is on" "[ \"\$(cat /sys/module/nvme_core/parameters/multipath)\" = Y ]"
# When the kernel reads each ANA log page ("ANA group N: state." from multipath.c's debug lines)
# and the case's own marks (unix ms) in the kernel log: where an ANA change spends its time.
# Only a diagnosis: nothing fails without dynamic debug.
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2> /dev/null
echo 'file drivers/nvme/host/multipath.c +p' > /sys/kernel/debug/dynamic_debug/control 2> /dev/null ||
  echo "(no dynamic debug: the kernel's ANA log reads are not timed)"
mark() { echo "interop mark: $* at unix ms $(now_ms)" > /dev/kmsg 2> /dev/null; }
DMESG0=$(dmesg | wc -l)
echo "+ $CLUSTER start $CEPH 3300 ${IMAGE_MB}M"
t0=$(date +%s)
if ! timeout 600 "$CLUSTER" start "$CEPH" 3300 "${IMAGE_MB}M"; then
  echo "FAIL: the Ceph test cluster did not start within 600 s (log tails above)"
  exit 1
fi
echo "Ceph cluster up after $(( $(date +%s) - t0 )) s"
run "image rbd/img2 of $IMAGE_MB MiB" timeout 120 rbd -c "$CONF" create rbd/img2 --size "${IMAGE_MB}M"
for img in img img2; do
  check "rbd/$img has the exclusive-lock feature" "rbd -c '$CONF' info rbd/$img | grep -q 'features:.*exclusive-lock'"
done
# A dead gateway's image lock is broken only once the OSD expires its watch on the image
# header: osd_client_watch_timeout, 30 s by default, as long as the kernel host's I/O timeout.
# 15 s keeps the takeover inside it, as in case rbd-kernel-multipath.
expect "OSD watch timeout 15 s" "15" \
  timeout 120 ceph -c "$CONF" tell osd.0 config set osd_client_watch_timeout 15

gw_cfg gw-a 1
gw_cfg gw-b 100
gw_cfg gw-c 200
t0=$(date +%s)
for g in $GATEWAYS; do start_gw "$g" "$g"; done
for g in $GATEWAYS; do
  run "$g joined the group and owns its home ANA group within 180 s" wait_gw "$g" 180
done
echo "three gateways up after $(( $(date +%s) - t0 )) s"
status_of gw-a
HOMES=$(for g in $GATEWAYS; do echo "$g=$(home "$g")"; done | tr '\n' ' ')
echo "home ANA groups: $HOMES"
check "three home groups" "[ \$(echo '$HOMES' | tr ' ' '\n' | sed -n 's/.*=//p' | sort -u | wc -l) -eq 3 ]"

# The group's configuration, typed on gw-a only. The namespaces name the group's cluster
# settings and nothing else, so every gateway opens them on its one group client (rbd_cache
# off): fencing that client stops every write the gateway could still send.
run "add the subsystem" ctl_on gw-a add-subsystem "$NQN" --allow-any-host
run "add namespace 1 (rbd/img)" ctl_on gw-a add-ns "$NQN" rbd:rbd/img --nsid 1 \
  --ceph-conf "$CONF"
run "add namespace 2 (rbd/img2)" ctl_on gw-a add-ns "$NQN" rbd:rbd/img2 --nsid 2 \
  --ceph-conf "$CONF"
# Each gateway its own listener.
for g in $GATEWAYS; do
  run "$g: its listener" ctl_on "$g" add-port "$(portid_of "$g")" tcp "$GUEST_IP" "$(port_of "$g")"
  run "$g: subsystem on its listener" ctl_on "$g" link-subsystem "$(portid_of "$g")" "$NQN"
done
for g in $GATEWAYS; do
  wait_port "$GUEST_IP" "$(port_of "$g")" 60
  _n=120
  until [ "$(status_of "$g" | grep -cE '^  namespace (1|2) ')" -eq 2 ] || [ "$_n" -eq 0 ]; do
    sleep 0.5
    _n=$((_n - 1))
  done
  served=$(status_of "$g" | grep -cE '^  namespace (1|2) ')
  check "$g serves both namespaces" "[ $served -eq 2 ]"
  check "$g: both images open on the group's client, rbd_cache off" \
    "[ \$(grep -c 'RBD image opened.*rbd_cache=false.*group_client=true' '$LOG/$g.log') -eq 2 ]"
done
G1=$(anagrp 1)
G2=$(anagrp 2)
OWN1=$(gateway_of "$G1")
OWN2=$(gateway_of "$G2")
echo "namespace 1: ANA group $G1 ($OWN1); namespace 2: ANA group $G2 ($OWN2)"
check "the two namespaces are in different gateways' ANA groups" \
  "[ -n '$OWN1' ] && [ -n '$OWN2' ] && [ '$G1' != '$G2' ] && [ '$OWN1' != '$OWN2' ]"

for g in $GATEWAYS; do
  run "connect to $g" nvme connect -t tcp -a "$GUEST_IP" -s "$(port_of "$g")" -n "$NQN" \
    --reconnect-delay=2
done
DEV1=$(wait_nvme_ns "$NQN" 1 60) || { echo "FAIL: no disk for namespace 1"; exit 1; }
DEV2=$(wait_nvme_ns "$NQN" 2 60) || { echo "FAIL: no disk for namespace 2"; exit 1; }
echo "multipath disks: namespace 1 $DEV1, namespace 2 $DEV2"
expect "one subsystem, three paths" "4422" nvme list-subsys
for ns in 1 2; do
  eval "own=\$OWN$ns"
  for g in $GATEWAYS; do
    if [ "$g" = "$own" ]; then want=optimized; else want=non-optimized; fi
    run "namespace $ns through $g: $want" wait_ana "$(port_of "$g")" "$want" 60 "$ns"
  done
done
ana_table
for ns in 1 2; do
  eval "dev=\$DEV$ns"
  check "namespace $ns's disk is the whole image" "[ \$(cat /sys/block/$dev/size) -eq $((IMAGE_MB * 2048)) ]"
done

SURVIVORS=$(echo $GATEWAYS | tr ' ' '\n' | grep -vx "$OWN1" | tr '\n' ' ')
BLOCKLIST0=$(timeout 120 ceph -c "$CONF" osd blocklist ls 2>/dev/null | grep -c '^[0-9]')
start_bg fio fio --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
  --size="${FIO_MB}M" --verify=crc32c --verify_fatal=1 --do_verify=1 --output-format=terse \
  --name=ns1 --filename="/dev/$DEV1" --name=ns2 --filename="/dev/$DEV2"
FIO_PID=$(cat "$LOG/fio.pid")
fio_start=$(now_ms)
# The host writes namespace 1 through its owner: that gateway takes rbd/img's exclusive lock.
_n=60
while [ -z "$(locker img)" ] && [ "$_n" -gt 0 ]; do sleep 1; _n=$((_n - 1)); done
LOCK1=$(locker img)
check "namespace 1's owner took rbd/img's lock within 60 s of fio's start" "[ -n '$LOCK1' ]"
echo "rbd/img locked by $LOCK1, rbd/img2 by $(locker img2)"
sleep 3
check "fio is still writing when $OWN1 dies" "kill -0 $FIO_PID"

# --- From here until fio ends the case only kills and starts processes (and looks). ---
run "kill $OWN1, owner of ANA group $G1 (SIGKILL)" kill -KILL "$(cat "$LOG/$OWN1.pid")"
killed=$(now_ms)
mark "SIGKILL of $OWN1"
rm -f "$LOG/$OWN1.pid"
echo "killed $(( (killed - fio_start) / 1000 )) s after fio's start"
# Which survivor takes the group: the kernel's view (sysfs, polled every 0.1 s) gives the time;
# the gateway's own move line (unix ms, same clock) when it took the group.
TAKER=""
PATH_MS=""
_n=1200
while [ "$_n" -gt 0 ]; do
  for g in $SURVIVORS; do [ "$(ana_of "$g" 1)" = optimized ] && TAKER=$g; done
  [ -n "$TAKER" ] && { PATH_MS=$(( $(now_ms) - killed )); break; }
  sleep 0.1
  _n=$((_n - 1))
done
ana_table
check "namespace 1's path through a survivor optimized within 120 s of the kill" "[ -n '$TAKER' ]"
echo "TIMING kill -> namespace 1's path through $TAKER optimized (sysfs poll): $PATH_MS ms"
status_of "$TAKER" > "$LOG/taker-status.txt"
cat "$LOG/taker-status.txt"
check "$TAKER owns ANA group $G1" "grep -qE '^group ANA groups owned: \\[(.*, )?$G1(,.*)?\\]' '$LOG/taker-status.txt'"
took_at=$(sed -n "s/^group move at \\([0-9]*\\) ms: took ANA group $G1 after.*/\\1/p" "$LOG/taker-status.txt" | tail -1)
check "$TAKER says when it took ANA group $G1" "[ -n '$took_at' ]"
echo "TIMING kill -> $TAKER took ANA group $G1 (its move line): $((took_at - killed)) ms"
k=$(kernel_ms "SIGKILL of $OWN1" "$(ctrl_name "$TAKER")" "$G1" optimized)
[ -n "$k" ] && echo "TIMING kill -> the kernel read ANA group $G1 optimized through $TAKER (kernel log): $k ms"
# The blocklist is read now, soon after the fence, and checked at the end: a fence's entry
# expires (FENCE_LEASES x the lease: 300 s here), and on a slow machine fio outlasts that.
# librbd breaks the dead owner's lock at the taker's first write to the image (fio is
# writing), so both entries come within seconds.
fenced=$(sed -n "s/.*fenced the previous holder \\([^ ]*\\).*/\\1/p" "$LOG/taker-status.txt" | tail -1)
check "$TAKER fenced the previous holder when it took ANA group $G1" "[ -n '$fenced' ]"
for _ in $(seq 60); do
  timeout 120 ceph -c "$CONF" osd blocklist ls 2>/dev/null > "$LOG/blocklist.txt" || true
  grep -qF "$fenced" "$LOG/blocklist.txt" && grep -qF "$LOCK1 " "$LOG/blocklist.txt" && break
  sleep 1
done
cat "$LOG/blocklist.txt"
FIO_AT_RESTART=no
kill -0 "$FIO_PID" 2>/dev/null && FIO_AT_RESTART=yes

# The dead gateway is started again with the same command (a new log). The kernel reconnects
# (every 2 s) and reads the ANA log: while the taker holds the group, the restarted gateway
# must report it non-optimized; after the failback delay it takes the group back. A dead
# controller's path keeps its last ANA state in sysfs: only a live controller's counts.
start_gw "$OWN1" "$OWN1-restarted"
restarted=$(now_ms)
mark "restart of $OWN1"
RECONNECT_MS=""
BEFORE=""
BACK_PATH_MS=""
_n=2400
while [ "$_n" -gt 0 ]; do
  if [ "$(ctrl_state "$OWN1")" = live ]; then
    [ -n "$RECONNECT_MS" ] || RECONNECT_MS=$(( $(now_ms) - restarted ))
    a=$(ana_of "$OWN1" 1)
    if [ "$a" = optimized ]; then BACK_PATH_MS=$(( $(now_ms) - restarted )); break; fi
    # (Read before the taker's status: a state the kernel read while the taker still held
    # the group.)
    [ -n "$BEFORE" ] || { owns "$TAKER" "$G1" && BEFORE=$a; }
  fi
  sleep 0.1
  _n=$((_n - 1))
done
FIO_AT_FAILBACK=no
kill -0 "$FIO_PID" 2>/dev/null && FIO_AT_FAILBACK=yes
ana_table
check "the kernel reconnected to $OWN1 within 240 s of its restart" "[ -n '$RECONNECT_MS' ]"
echo "TIMING restart of $OWN1 -> the kernel's controller live again: $RECONNECT_MS ms"
echo "namespace 1 through the restarted $OWN1 while $TAKER held ANA group $G1: ${BEFORE:-not sampled}"
check "the restarted $OWN1 did not report ANA group $G1 optimized while $TAKER held it" \
  "[ '$BEFORE' != optimized ]"
check "the kernel's path to $OWN1 for namespace 1 optimized again within 240 s of its restart" "[ -n '$BACK_PATH_MS' ]"
echo "TIMING restart of $OWN1 -> namespace 1's path through it optimized (sysfs poll): $BACK_PATH_MS ms"
status_of "$OWN1" > "$LOG/restarted-status.txt"
back_at=$(sed -n "s/^group move at \\([0-9]*\\) ms: took ANA group $G1\$/\\1/p" "$LOG/restarted-status.txt" | tail -1)
check "$OWN1 says when it took ANA group $G1 back" "[ -n '$back_at' ]"
echo "TIMING restart of $OWN1 -> it took ANA group $G1 back (its move line): $((back_at - restarted)) ms (failback delay $FAILBACK_MS ms)"
k=$(kernel_ms "restart of $OWN1" "$(ctrl_name "$OWN1")" "$G1" optimized)
[ -n "$k" ] && echo "TIMING restart of $OWN1 -> the kernel read ANA group $G1 optimized through it (kernel log): $k ms"
echo "fio still running at the restart: $FIO_AT_RESTART, at the failback: $FIO_AT_FAILBACK"

_n=3000
while kill -0 "$FIO_PID" 2>/dev/null && [ "$_n" -gt 0 ]; do sleep 0.2; _n=$((_n - 1)); done
check "fio finished within 10 minutes of the failback" "! kill -0 $FIO_PID 2>/dev/null"
wait "$FIO_PID"
FIO_RC=$?
fio_end=$(now_ms)
rm -f "$LOG/fio.pid"
echo "fio ran $(( (fio_end - fio_start) / 1000 )) s, ended $(( (fio_end - killed) / 1000 )) s after the kill"
# --- The job is over. ---
cat "$LOG/fio.log"
check "fio exit status 0 (no I/O error, data verified)" "[ $FIO_RC -eq 0 ]"
check "fio reports no error" "! grep -qiE 'error|verify: bad' '$LOG/fio.log'"
check "fio reported both jobs" "[ \$(grep -c '^3;' '$LOG/fio.log') -eq 2 ]"
# Terse v3, one line per job: field 3 the job, 15 the read and 56 the write completion latency
# maximum (us): the longest any I/O waited.
awk -F';' '{ printf "TIMING fio %s: longest write %d ms, longest read %d ms, %d KiB written, %d KiB read\n", $3, $56 / 1000, $15 / 1000, $47, $6 }' "$LOG/fio.log"

status_of "$TAKER" > "$LOG/taker-status-after.txt"
cat "$LOG/taker-status-after.txt"
check "$TAKER took ANA group $G1 when $OWN1 went silent" \
  "grep -q 'took ANA group $G1 after its gateway was silent' '$LOG/taker-status-after.txt'"
check "$TAKER fenced the previous holder" "grep -q 'fenced the previous holder' '$LOG/taker-status-after.txt'"
check "$TAKER gave ANA group $G1 back" "grep -q 'gave ANA group $G1 back' '$LOG/taker-status-after.txt'"
for g in $SURVIVORS; do
  check "$g lost no lease" "! '$T' ctl --socket '$WORK/$g.sock' status | grep 'lost ANA group'"
  # What each gateway served: commands, and the longest one (the new owner's first writes wait
  # for the dead owner's image lock).
  echo "$g: $(status_of "$g" | grep -o 'commands [0-9]*\|longest_command_ms [0-9]*\|stuck_commands [0-9]*' | tr '\n' ' ')"
done
status_of "$OWN1"
for g in $GATEWAYS; do
  o=$(owned "$g")
  h=$(home "$g")
  check "$g owns its home group $h only (owns: $o)" "[ -n '$h' ] && [ '$o' = '$h' ]"
done
check "the Ceph blocklist grew after the kill (the group's fence, librbd's lock break)" \
  "[ \$(grep -c '^[0-9]' '$LOG/blocklist.txt') -gt $BLOCKLIST0 ]"
check "the fenced group client $fenced is blocklisted" "grep -qF '$fenced' '$LOG/blocklist.txt'"
check "the dead owner's image client $LOCK1 is blocklisted (librbd broke its lock)" \
  "grep -qF '$LOCK1 ' '$LOG/blocklist.txt'"
ana_table
for ns in 1 2; do
  eval "own=\$OWN$ns"
  for g in $GATEWAYS; do
    if [ "$g" = "$own" ]; then want=optimized; else want=non-optimized; fi
    run "namespace $ns through $g: $want again" wait_ana "$(port_of "$g")" "$want" 30 "$ns"
  done
done
echo "rbd/img locked by $(locker img), rbd/img2 by $(locker img2)"
dmesg | tail -n +"$((DMESG0 + 1))" | grep -iE 'nvme|blk_|interop mark' > "$LOG/dmesg-case.txt"
echo "kernel log of the case (nvme):"
grep -vE 'Reconnecting in|failed to connect socket|Failed reconnect attempt' "$LOG/dmesg-case.txt"
echo 'file drivers/nvme/host/multipath.c -p' > /sys/kernel/debug/dynamic_debug/control 2> /dev/null
check "no I/O error in the kernel's log" "! grep -qiE 'I/O error' '$LOG/dmesg-case.txt'"
expect "disconnect" "disconnected 3 controller" nvme disconnect -n "$NQN"
for g in $SURVIVORS; do stop_bg "$g"; done
stop_bg "$OWN1-restarted"
for f in $GATEWAYS "$OWN1-restarted"; do
  check "$f.log: no panic, no error" "! grep -nE 'ERROR|panicked' '$LOG/$f.log'"
  grep -n 'WARN' "$LOG/$f.log" | grep -v 'the configuration has no ports' | sed "s/^/$f: /"
done
echo "gateway group under the kernel's native multipath: all checks passed"
