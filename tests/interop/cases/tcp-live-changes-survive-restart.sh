# Live changes are durable (issue 25): nvmf-target in the guest with --config, the kernel NVMe/TCP
# host connected (ctrl_loss_tmo 60 s, reconnect every second); `ctl add-ns` adds namespace 2,
# which the host writes; `ctl reload` and SIGHUP keep it (same controller, no reconnect); the
# target stopped with SIGTERM and started again, then killed with SIGKILL and started again:
# each time the host reconnects, namespace 2 is there and reads back what was written. The
# config file holds the namespace and `ctl export` prints the file.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:durable
T="$BIN/nvmf-target"
CTL="$WORK/ctl.sock"
CFG="$WORK/durable.yaml"

# ns_disk NSID: the disk (nvmeXnY) of namespace NSID of $NQN, if the host has it.
ns_disk() {
  for _b in /sys/block/nvme*; do
    case ${_b##*/} in nvme*c*n*) continue ;; esac
    [ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    [ "$(cat "$_b/nsid" 2>/dev/null)" = "$1" ] && { basename "$_b"; return 0; }
  done
  return 1
}

# wait_ns NSID [SECS]: waits until namespace NSID's disk is there.
wait_ns() {
  _n=$(( ${2:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    ns_disk "$1" > /dev/null && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "namespace $1 of $NQN is not there after ${2:-30} s" >&2
  return 1
}

# ctrl_state: the state of the kernel's controller for $NQN (live, connecting, ...).
ctrl_state() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] && { cat "$_c/state"; return 0; }
  done
  return 1
}

# wait_live [SECS]: waits until the controller is live again (after a reconnect).
wait_live() {
  _n=$(( ${1:-60} * 5 ))
  while [ "$_n" -gt 0 ]; do
    [ "$(ctrl_state)" = live ] && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "the controller for $NQN is $(ctrl_state), not live" >&2
  return 1
}

# reads_back DISK: namespace 2 holds the pattern written through the host.
reads_back() {
  dd if="/dev/$1" of="$WORK/back" bs=1M count=4 iflag=direct status=none && cmp "$WORK/pattern" "$WORK/back"
}

run "backing file 1 (32 MiB)" truncate -s 32M "$WORK/ns1.img"
run "backing file 2 (16 MiB)" truncate -s 16M "$WORK/ns2.img"
cat > "$CFG" <<EOF
# the operator's file
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $WORK/ns1.img }
EOF
start_bg target1 "$T" --config "$CFG" --ctl-socket "$CTL"
wait_port "$GUEST_IP" 4420
run "connect" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --ctrl-loss-tmo=60 --reconnect-delay=1
run "namespace 1" wait_ns 1

run "ctl add-ns" "$T" ctl --socket "$CTL" add-ns "$NQN" "$WORK/ns2.img" --nsid 2
run "namespace 2 appears" wait_ns 2
DEV2=$(ns_disk 2)
run "pattern" dd if=/dev/urandom of="$WORK/pattern" bs=1M count=4 status=none
run "write namespace 2 through the host" dd if="$WORK/pattern" of="/dev/$DEV2" bs=1M oflag=direct status=none
check "the config file holds namespace 2" "grep -q '$WORK/ns2.img' '$CFG'"
run "ctl export" sh -c "'$T' ctl --socket '$CTL' export > '$WORK/exported.yaml'"
run "ctl export prints the file" cmp "$WORK/exported.yaml" "$CFG"
run "check-config accepts the rewritten file" "$T" check-config "$CFG"

expect "ctl reload: no change" "no change" "$T" ctl --socket "$CTL" reload
run "SIGHUP" kill -HUP "$(cat "$LOG/target1.pid")"
sleep 1
check "namespace 2 stays after reload and SIGHUP" "[ -e /sys/block/$DEV2 ]"
run "namespace 2 reads back" reads_back "$DEV2"

# SIGTERM, start again: the host reconnects and finds namespace 2 with its data.
stop_bg target1
start_bg target2 "$T" --config "$CFG" --ctl-socket "$CTL"
run "the host reconnects after SIGTERM + start" wait_live 60
run "namespace 2 after the restart" wait_ns 2
DEV2=$(ns_disk 2)
run "namespace 2 reads back after SIGTERM + start" reads_back "$DEV2"
log_clean target2

# SIGKILL, start again.
run "SIGKILL" kill -KILL "$(cat "$LOG/target2.pid")"
rm -f "$LOG/target2.pid" "$CTL"
start_bg target3 "$T" --config "$CFG" --ctl-socket "$CTL"
run "the host reconnects after SIGKILL + start" wait_live 60
run "namespace 2 after SIGKILL + start" wait_ns 2
DEV2=$(ns_disk 2)
run "namespace 2 reads back after SIGKILL + start" reads_back "$DEV2"
expect "ctl status lists namespace 2" "namespace 2 $WORK/ns2.img" "$T" ctl --socket "$CTL" status
expect "disconnect" "disconnected 1 controller" nvme disconnect -n "$NQN"
stop_bg target3

log_clean target3
echo "a namespace added live survives reload, SIGHUP, SIGTERM and SIGKILL with the kernel host connected: all checks passed"
