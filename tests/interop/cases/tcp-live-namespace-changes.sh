# Live namespace changes seen by the Linux kernel NVMe/TCP host without reconnecting (issue 6):
# nvmf-target in the guest (TCP on the guest's address, a file namespace on tmpfs, the admin
# socket in $WORK), the kernel host connected; then `nvmf-target ctl add-ns` makes nvmeXn2
# appear, growing the backing file + `ctl resize-ns` grows /sys/block/<disk>/size,
# `ctl remove-ns` makes n2 disappear, and SIGHUP with an edited config adds and removes a
# namespace too. The controller (its cntlid) is the same from the first check to the last: the
# host learnt every change from Namespace Attribute Changed events, not from a reconnect.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:live
T="$BIN/nvmf-target"
CTL="$WORK/ctl.sock"
CFG="$WORK/live.yaml"

# ns_disk NSID: prints the disk (nvmeXnY) of namespace NSID of $NQN, if the host has it.
ns_disk() {
  for _b in /sys/block/nvme*; do
    case ${_b##*/} in nvme*c*n*) continue ;; esac # a multipath path's hidden disk
    [ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    [ "$(cat "$_b/nsid" 2>/dev/null)" = "$1" ] && { basename "$_b"; return 0; }
  done
  return 1
}

# wait_ns NSID present|absent [SECS]: waits until namespace NSID's disk is there (or gone).
wait_ns() {
  _n=$(( ${3:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    if ns_disk "$1" > /dev/null; then [ "$2" = present ] && return 0
    else [ "$2" = absent ] && return 0
    fi
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "namespace $1 of $NQN is not $2 after ${3:-30} s" >&2
  return 1
}

# wait_size DISK SECTORS [SECS]: waits until /sys/block/DISK/size is SECTORS.
wait_size() {
  _n=$(( ${3:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    [ "$(cat "/sys/block/$1/size" 2>/dev/null)" = "$2" ] && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "/sys/block/$1/size is $(cat "/sys/block/$1/size" 2>/dev/null), not $2" >&2
  return 1
}

# ctrl_cntlid: the cntlid of the kernel's controller for $NQN (one controller expected).
ctrl_cntlid() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] && { cat "$_c/cntlid"; return 0; }
  done
  return 1
}

# config NAMESPACES...: writes $CFG with one TCP port on the guest's address and the given
# "NSID:PATH" namespaces.
config() {
  {
    echo "transport: { in_capsule_data_size: 8192 }"
    echo "ports:"
    echo "  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: \"4420\", subsystems: [$NQN] }"
    echo "subsystems:"
    echo "  - nqn: $NQN"
    echo "    allow_any_host: true"
    echo "    namespaces:"
    for _ns in "$@"; do
      echo "      - { nsid: ${_ns%%:*}, device_path: ${_ns#*:} }"
    done
  } > "$CFG"
}

run "backing file 1 (64 MiB)" truncate -s 64M "$WORK/ns1.img"
run "backing file 2 (32 MiB)" truncate -s 32M "$WORK/ns2.img"
run "backing file 3 (16 MiB)" truncate -s 16M "$WORK/ns3.img"
config "1:$WORK/ns1.img"
run "check-config" "$T" check-config "$CFG"
start_bg target "$T" --config "$CFG" --ctl-socket "$CTL"
wait_port "$GUEST_IP" 4420
run "connect" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN"
DEV1=$(wait_nvme "$NQN") || { echo "FAIL: no namespace disk for $NQN"; exit 1; }
CNTLID=$(ctrl_cntlid) || { echo "FAIL: no controller for $NQN"; exit 1; }
echo "connected: controller cntlid $CNTLID, namespace 1 is $DEV1"
check "namespace 1 is 64 MiB" "[ \$(cat /sys/block/$DEV1/size) -eq $((64 * 2048)) ]"
if ns_disk 2 > /dev/null; then echo "FAIL: namespace 2 exists before add-ns"; exit 1; fi
expect "ctl status lists the connected host" "$NQN" "$T" ctl --socket "$CTL" status

# ctl add-ns: the kernel host sees namespace 2 without reconnecting.
run "ctl add-ns" "$T" ctl --socket "$CTL" add-ns "$NQN" "$WORK/ns2.img" --nsid 2
run "namespace 2 appears" wait_ns 2 present
DEV2=$(ns_disk 2)
echo "namespace 2 is $DEV2"
run "namespace 2 is 32 MiB" wait_size "$DEV2" $((32 * 2048))
run "write namespace 2" dd if=/dev/urandom of="$WORK/pattern" bs=1M count=4 status=none
run "write namespace 2 through the host" dd if="$WORK/pattern" of="/dev/$DEV2" bs=1M oflag=direct status=none
run "read it back" dd if="/dev/$DEV2" of="$WORK/back" bs=1M count=4 iflag=direct status=none
run "namespace 2 holds what was written" cmp "$WORK/pattern" "$WORK/back"
run "the backing file too" sh -c "head -c 4194304 '$WORK/ns2.img' | cmp - '$WORK/pattern'"

# Grow the backing file + ctl resize-ns: /sys/block/<disk>/size grows.
run "grow backing file 1 to 128 MiB" truncate -s 128M "$WORK/ns1.img"
run "ctl resize-ns" "$T" ctl --socket "$CTL" resize-ns "$NQN" 1
run "namespace 1 grows to 128 MiB" wait_size "$DEV1" $((128 * 2048))
run "the grown end is readable" dd if="/dev/$DEV1" of=/dev/null bs=1M skip=127 count=1 iflag=direct status=none

# ctl remove-ns: namespace 2 disappears.
run "ctl remove-ns" "$T" ctl --socket "$CTL" remove-ns "$NQN" 2
run "namespace 2 disappears" wait_ns 2 absent
check "namespace 1 stays" "[ -e /sys/block/$DEV1 ]"

# SIGHUP with an edited config: namespace 3 added (and namespace 1 at its new size).
config "1:$WORK/ns1.img" "3:$WORK/ns3.img"
run "check-config (edited)" "$T" check-config "$CFG"
run "SIGHUP" kill -HUP "$(cat "$LOG/target.pid")"
run "namespace 3 appears after SIGHUP" wait_ns 3 present
DEV3=$(ns_disk 3)
run "namespace 3 is 16 MiB" wait_size "$DEV3" $((16 * 2048))
# An invalid config is refused whole: the running one stays.
run "invalid config" sh -c "echo 'subsystems: [ { nqn: $NQN, bogus_key: 1 } ]' > '$CFG'"
run "SIGHUP (invalid config)" kill -HUP "$(cat "$LOG/target.pid")"
run "the refusal is logged" wait_log target "refused"
sleep 1
check "namespace 3 stays after the refused reload" "[ -e /sys/block/$DEV3 ]"
# And removed again by the next reload.
config "1:$WORK/ns1.img"
run "SIGHUP (namespace 3 removed)" kill -HUP "$(cat "$LOG/target.pid")"
run "namespace 3 disappears after SIGHUP" wait_ns 3 absent

run "I/O on namespace 1 still works" dd if="/dev/$DEV1" of=/dev/null bs=1M count=8 iflag=direct status=none
NOW=$(ctrl_cntlid) || { echo "FAIL: the controller for $NQN is gone"; exit 1; }
check "no reconnect: the controller is the one connected first (cntlid $CNTLID)" "[ '$NOW' = '$CNTLID' ]"
expect "disconnect" "disconnected 1 controller" nvme disconnect -n "$NQN"
stop_bg target
# The refused reload is logged as an error by design; anything else is not allowed.
run "target log without other errors" sh -c "grep -v 're-read refused' '$LOG/target.log' > '$LOG/target-rest.log'"
log_clean target-rest
echo "live namespace changes seen by the kernel host without reconnecting: all checks passed"
