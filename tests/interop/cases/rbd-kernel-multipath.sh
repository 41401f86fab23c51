# Two gateways of one Ceph RBD image under the kernel's native multipath (issue 17): a private
# Ceph cluster runs in the guest (scripts/ceph-test-cluster: one monitor, one memstore OSD on
# 127.0.0.1) and two nvmf-target processes export its image rbd/img as one subsystem —
# gateway A on port 4420 (controller ids 1-99, ANA optimized), gateway B on port 4421
# (100-199, non-optimized), the same NQN, serial and namespace identifiers, each its own
# librbd client with rbd_cache off. The kernel host connects to both and writes through A; a
# verifying fio job runs while A is killed with SIGKILL: the host fails over to B, B's librbd
# breaks the dead gateway's exclusive lock (blocklisting it) and fio finishes without an
# error, every block written through A read back through B.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:rbd-multipath
T="$BIN/nvmf-target"
CLUSTER="$INTEROP/../../scripts/ceph-test-cluster"
CEPH=$WORK/ceph
CONF=$CEPH/ceph.conf
IMAGE_MB=64
# fio covers the image's first half: through librbd under TCG writes run at ~100 IOPS, so
# this is ~80 s of writes (A dies ~10 s in) and the read-back, not ~4 minutes.
FIO_MB=32
# Plain logs: the case greps the gateways' log fields (tracing colours them otherwise).
export NO_COLOR=1

# Whatever ends the case: the gateways go before the cluster they are clients of (a librbd
# client whose cluster is gone hangs on close), the Ceph logs are kept, the daemons stopped
# (the runner only kills what it started; an OSD left running holds the image in memory).
cleanup() {
  for _n in node-a node-b; do
    [ -f "$LOG/$_n.pid" ] && kill -KILL "$(cat "$LOG/$_n.pid")" 2>/dev/null
    rm -f "$LOG/$_n.pid"
  done
  [ -d "$CEPH/log" ] && cp -r "$CEPH/log" "$LOG/ceph-log"
  "$CLUSTER" stop "$CEPH" > /dev/null 2>&1
}
trap cleanup EXIT

# node_cfg NAME PORT CNTLID_MIN CNTLID_MAX ANA_STATE: writes $WORK/NAME.yaml; the gateway is
# the Ceph client client.gw-NAME (its own log and admin socket in the cluster's directory).
# stuck_command_ms: B's first writes wait in librbd for the dead A's exclusive lock until the
# OSD expires A's watch (15 s, below): by design, so the stuck-command bound is raised above
# that, and stays under the kernel host's 30 s I/O timeout so a real hang still shows.
node_cfg() {
  cat > "$WORK/$1.yaml" <<EOF
transport: { stuck_command_ms: 25000 }
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "$2", subsystems: [$NQN],
      ana_groups: [{ grpid: 1, state: $5 }] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    cntlid_min: $3
    cntlid_max: $4
    namespaces:
      - { nsid: 1, device_path: "rbd:rbd/img", ceph_conf: $WORK/gw.conf, client_id: gw-$1, anagrpid: 1 }
EOF
}

# locker: the address of the client holding the image's exclusive lock (empty: none).
locker() {
  timeout 60 rbd -c "$CONF" lock ls rbd/img 2>/dev/null | awk '/^client\./ { print $NF }'
}

check "native multipath is on" "[ \"\$(cat /sys/module/nvme_core/parameters/multipath)\" = Y ]"
# Under TCG the daemons start far slower than on the host (seconds there): bounded, and the
# script prints the daemons' log tails when a step fails or the time runs out.
echo "+ $CLUSTER start $CEPH 3300 ${IMAGE_MB}M"
t0=$(date +%s)
if ! timeout 600 "$CLUSTER" start "$CEPH" 3300 "${IMAGE_MB}M"; then
  echo "FAIL: the Ceph test cluster did not start within 600 s (log tails above)"
  exit 1
fi
echo "Ceph cluster up after $(( $(date +%s) - t0 )) s"
expect "image rbd/img of $IMAGE_MB MiB" "size $IMAGE_MB MiB" rbd -c "$CONF" info rbd/img
check "rbd/img has the exclusive-lock feature" "rbd -c '$CONF' info rbd/img | grep -q 'features:.*exclusive-lock'"
# A dead gateway's lock is broken only once the OSD expires its watch on the image header:
# osd_client_watch_timeout, 30 s by default, as long as the kernel host's I/O timeout. 15 s
# keeps the takeover inside it (watch pings come every 5 s), as a gateway deployment would.
expect "OSD watch timeout 15 s" "15" \
  timeout 120 ceph -c "$CONF" tell osd.0 config set osd_client_watch_timeout 15
# The gateways' clients: write-through (rbd_cache off), so a write the host saw complete is
# in the OSD even when its gateway dies the next instant (the exclusive-lock notes in
# target/src/backend/rbd/mod.rs).
run "gateway ceph.conf" cp "$CONF" "$WORK/gw.conf"
printf '[client]\nrbd cache = false\n' >> "$WORK/gw.conf"

node_cfg a 4420 1 99 optimized
node_cfg b 4421 100 199 non-optimized
start_bg node-a "$T" --config "$WORK/a.yaml" --ctl-socket "$WORK/a.sock"
start_bg node-b "$T" --config "$WORK/b.yaml" --ctl-socket "$WORK/b.sock"
# Each gateway opens the image (a librados connection) before it listens.
wait_port "$GUEST_IP" 4420 120
wait_port "$GUEST_IP" 4421 120
check "gateway A: image open, rbd_cache off" "grep -q 'RBD image opened.*rbd_cache=false' '$LOG/node-a.log'"
check "gateway B: image open, rbd_cache off" "grep -q 'RBD image opened.*rbd_cache=false' '$LOG/node-b.log'"
expect "both gateways watch the image" "watcher=.*watcher=" sh -c "rbd -c '$CONF' status rbd/img | tr '\n' ' '"
check "nobody holds the exclusive lock before the host writes" "[ -z '$(locker)' ]"

run "connect to gateway A" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN"
run "connect to gateway B" nvme connect -t tcp -a "$GUEST_IP" -s 4421 -n "$NQN"
DEV=$(wait_nvme "$NQN" 60) || { echo "FAIL: no namespace disk for $NQN"; exit 1; }
echo "multipath disk: $DEV; paths: $(path_of 4420) $(path_of 4421)"
run "path A optimized" wait_ana 4420 optimized
run "path B non-optimized" wait_ana 4421 non-optimized
expect "one subsystem, both paths" "4421" nvme list-subsys
PA=$(path_of 4420) && PB=$(path_of 4421) || { echo "FAIL: a path disk is missing"; exit 1; }
check "both paths belong to the one multipath disk $DEV" "[ ${PA%c*} = ${DEV%n*} ] && [ ${PB%c*} = ${DEV%n*} ] && [ $PA != $PB ]"
check "the disk is the whole image" "[ \$(cat /sys/block/$DEV/size) -eq $((IMAGE_MB * 2048)) ]"

start_bg fio fio --name=rbd-failover --filename="/dev/$DEV" --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=4k --iodepth=16 --size="${FIO_MB}M" --verify=crc32c --verify_fatal=1 \
  --do_verify=1 --output-format=terse
FIO_PID=$(cat "$LOG/fio.pid")
# The host writes through the optimized path: gateway A takes the exclusive lock.
_n=60
while [ -z "$(locker)" ] && [ "$_n" -gt 0 ]; do sleep 1; _n=$((_n - 1)); done
OWNER_A=$(locker)
check "gateway A took the exclusive lock within 60 s of fio's start" "[ -n '$OWNER_A' ]"
echo "exclusive lock held by $OWNER_A"
sleep 3
check "fio is still writing when gateway A dies" "kill -0 $FIO_PID"
run "kill gateway A (SIGKILL)" kill -KILL "$(cat "$LOG/node-a.pid")"
rm -f "$LOG/node-a.pid"
killed=$(date +%s)
_n=1500
while kill -0 "$FIO_PID" 2>/dev/null && [ "$_n" -gt 0 ]; do sleep 0.2; _n=$((_n - 1)); done
check "fio finished within 5 minutes of the kill" "! kill -0 $FIO_PID 2>/dev/null"
wait "$FIO_PID"
FIO_RC=$?
echo "fio ended $(( $(date +%s) - killed )) s after the kill"
cat "$LOG/fio.log"
check "fio exit status 0 (no I/O error, data verified)" "[ $FIO_RC -eq 0 ]"
check "fio reports no error" "! grep -qiE 'error|verify: bad' '$LOG/fio.log'"
# Terse v3: field 15 is the read and field 56 the write completion latency maximum (us):
# the longest any I/O waited, the lock takeover included.
echo "failover: longest read $(cut -d';' -f15 "$LOG/fio.log") us, longest write $(cut -d';' -f56 "$LOG/fio.log") us"
rm -f "$LOG/fio.pid"
OWNER_B=$(locker)
echo "exclusive lock now held by $OWNER_B"
check "gateway B holds the lock now" "[ -n '$OWNER_B' ] && [ '$OWNER_B' != '$OWNER_A' ]"
expect "the dead gateway's client is blocklisted" "$OWNER_A" \
  timeout 120 ceph -c "$CONF" osd blocklist ls
expect "disconnect" "disconnected 2 controller" nvme disconnect -n "$NQN"
stop_bg node-b
log_clean node-b
echo "RBD gateway loss under the kernel's native multipath: all checks passed"
