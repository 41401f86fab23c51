# Namespace visibility per host (issue 26, item 1) seen by the Linux kernel NVMe/TCP host:
# nvmf-target in the guest with three file namespaces of one subsystem: 1 visible to every
# host, 2 only to this host (visible_to), 3 only to another host. `nvme list-ns` (Identify
# CNS 02h) and /sys/block list 1 and 2 only, and `nvme id-ns -n 3` reads back zeroes. Then
# `ctl ns-add-host` makes namespace 3 appear live (written through the host, compared with its
# backing file), `ctl ns-remove-host` makes it disappear; a namespace added with
# `--no-auto-visible` never appears; a host NQN of unknown form is refused. The controller
# (cntlid) is the same throughout: the host learnt every change from Namespace Attribute
# Changed and the Changed Namespace List.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:tenants
T="$BIN/nvmf-target"
CTL="$WORK/ctl.sock"
CFG="$WORK/tenants.yaml"
ME=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000d1
OTHER=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000d2

# ns_disk NSID: prints the disk (nvmeXnY) of namespace NSID of $NQN, if the host has it.
ns_disk() {
  for _b in /sys/block/nvme*; do
    case ${_b##*/} in nvme*c*n*) continue ;; esac # a multipath path's hidden disk
    [ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    [ "$(cat "$_b/nsid" 2>/dev/null)" = "$1" ] && { basename "$_b"; return 0; }
  done
  return 1
}

# disks: the NSIDs of $NQN's disks in /sys/block, sorted, one line.
disks() {
  for _b in /sys/block/nvme*; do
    case ${_b##*/} in nvme*c*n*) continue ;; esac
    [ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && cat "$_b/nsid"
  done | sort -n | tr '\n' ' '
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

# The kernel's controller for $NQN: its character device and cntlid.
ctrl_dev() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] && { echo "/dev/${_c##*/}"; return 0; }
  done
  return 1
}
ctrl_cntlid() { cat "/sys/class/nvme/${1##*/}/cntlid"; }

# list_ns: the NSIDs `nvme list-ns` reports, one line ("1 2 ").
list_ns() {
  nvme list-ns "$DEV" | sed -n 's/^\[ *[0-9]*\]: *0x\([0-9a-f]*\)$/\1/p' |
    while read -r _x; do printf '%d ' "0x$_x"; done
}

run "backing file 1 (16 MiB)" truncate -s 16M "$WORK/ns1.img"
run "backing file 2 (16 MiB)" truncate -s 16M "$WORK/ns2.img"
run "backing file 3 (32 MiB)" truncate -s 32M "$WORK/ns3.img"
run "backing file 4 (16 MiB)" truncate -s 16M "$WORK/ns4.img"
cat > "$CFG" <<EOF
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $WORK/ns1.img }
      - { nsid: 2, device_path: $WORK/ns2.img, auto_visible: false, visible_to: [$ME] }
      - { nsid: 3, device_path: $WORK/ns3.img, auto_visible: false, visible_to: [$OTHER] }
EOF
run "check-config" "$T" check-config "$CFG"
start_bg target "$T" --config "$CFG" --ctl-socket "$CTL"
wait_port "$GUEST_IP" 4420
run "connect as $ME" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --hostnqn=$ME --hostid=${ME##*:}
run "namespace 1 appears" wait_ns 1 present
run "namespace 2 appears" wait_ns 2 present
DEV=$(ctrl_dev) || { echo "FAIL: no controller for $NQN"; exit 1; }
CNTLID=$(ctrl_cntlid "$DEV")
echo "controller $DEV, cntlid $CNTLID; nvme list-ns: $(list_ns); disks of nsids: $(disks)"
L=$(list_ns)
check "nvme list-ns lists namespaces 1 and 2 only" "[ '$L' = '1 2 ' ]"
L=$(disks)
check "/sys/block has namespaces 1 and 2 only" "[ '$L' = '1 2 ' ]"
expect "id-ns of the other host's namespace reads zeroes" '^nsze *: 0$' nvme id-ns "$DEV" -n 3
expect "ctl status shows the visibility" "namespace 2 .* visible to \\[$ME\\]" "$T" ctl --socket "$CTL" status

# Namespace 3 shown to this host: it appears without a reconnect, and is the same data.
run "ctl ns-add-host" "$T" ctl --socket "$CTL" ns-add-host "$NQN" 3 "$ME"
run "namespace 3 appears" wait_ns 3 present
DEV3=$(ns_disk 3)
check "namespace 3 is 32 MiB" "[ \$(cat /sys/block/$DEV3/size) -eq $((32 * 2048)) ]"
L=$(list_ns)
check "nvme list-ns lists 1, 2 and 3" "[ '$L' = '1 2 3 ' ]"
run "pattern" dd if=/dev/urandom of="$WORK/pattern" bs=1M count=2 status=none
run "write namespace 3" dd if="$WORK/pattern" of="/dev/$DEV3" bs=1M oflag=direct status=none
run "namespace 3's backing file holds it" sh -c "head -c 2097152 '$WORK/ns3.img' | cmp - '$WORK/pattern'"

# And hidden again: it disappears; the others stay.
run "ctl ns-remove-host" "$T" ctl --socket "$CTL" ns-remove-host "$NQN" 3 "$ME"
run "namespace 3 disappears" wait_ns 3 absent
L=$(list_ns)
check "nvme list-ns lists 1 and 2 again" "[ '$L' = '1 2 ' ]"
L=$(disks)
check "/sys/block has namespaces 1 and 2 again" "[ '$L' = '1 2 ' ]"

# A namespace added with --no-auto-visible is seen by nobody until a host is added.
run "ctl add-ns --no-auto-visible" "$T" ctl --socket "$CTL" add-ns "$NQN" "$WORK/ns4.img" --nsid 4 --no-auto-visible
run "ctl ns-add-host (the other host)" "$T" ctl --socket "$CTL" ns-add-host "$NQN" 4 "$OTHER"
sleep 2
D4=$(ns_disk 4 || true)
check "namespace 4 does not appear" "[ -z '$D4' ]"
L=$(list_ns)
check "nvme list-ns still lists 1 and 2" "[ '$L' = '1 2 ' ]"
expect_fail "a host NQN of unknown form is refused" 'not of the form' "$T" ctl --socket "$CTL" ns-add-host "$NQN" 4 nqn.example:host
expect_fail "hosts of a namespace every host sees are refused" 'no-auto-visible' "$T" ctl --socket "$CTL" ns-add-host "$NQN" 1 "$ME"
run "the config file holds the visibility" grep -q "visible_to" "$CFG"

run "I/O on namespace 2 still works" dd if="/dev/$(ns_disk 2)" of=/dev/null bs=1M count=4 iflag=direct status=none
NOW=$(ctrl_cntlid "$DEV")
check "no reconnect: the controller is the one connected first (cntlid $CNTLID)" "[ '$NOW' = '$CNTLID' ]"
expect "disconnect" "disconnected 1 controller" nvme disconnect -n "$NQN"
stop_bg target
# The two refusals are logged as warnings by design; anything else is not allowed.
run "target log without other warnings" sh -c "grep -v 'refused' '$LOG/target.log' > '$LOG/target-rest.log'"
log_clean target-rest
echo "namespace visibility per host with the kernel host: all checks passed"
