# Reservations (issue 14) from the Linux kernel host: nvmf-target in the guest, the kernel
# connected twice with two host identities (two controllers of one subsystem); nvme-cli's
# resv-register / resv-acquire / resv-report / resv-release through each controller's
# character device give what the spec requires: a Write Exclusive reservation lets the
# other host read but not write (Reservation Conflict), preempt moves it, release ends it.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:resv
T="$BIN/nvmf-target"
CFG="$WORK/resv.yaml"
H1=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000c1
H2=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000c2
run "backing file (32 MiB)" truncate -s 32M "$WORK/ns1.img"
cat > "$CFG" <<EOF
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] }
  - { portid: 2, trtype: tcp, adrfam: ipv4, traddr: 127.0.0.1, trsvcid: "4420", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $WORK/ns1.img, ptpl_file: $WORK/ns1.resv }
EOF
start_bg target "$T" --config "$CFG"
wait_port "$GUEST_IP" 4420
run "connect as host 1" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --hostnqn=$H1 --hostid=${H1##*:}
# nvme-cli 2.3 refuses a second connection to the same address and subsystem even for
# another host NQN: host 2 comes in through the loopback port.
wait_port 127.0.0.1 4420
run "connect as host 2" nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN" --hostnqn=$H2 --hostid=${H2##*:}
DISK=$(wait_nvme "$NQN") || { echo "FAIL: no namespace disk"; exit 1; }
# One 4 KiB transfer: CDW12 NLB (0-based) in the namespace's logical blocks.
NLB=$(( 4096 / $(cat /sys/block/$DISK/queue/logical_block_size) - 1 ))
ctrl_of() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn")" = "$NQN" ] && [ "$(cat "$_c/hostnqn")" = "$1" ] && { echo "/dev/${_c##*/}"; return 0; }
  done
  return 1
}
C1=$(ctrl_of $H1) && C2=$(ctrl_of $H2) || { echo "FAIL: controllers not found"; exit 1; }
echo "host 1: $C1, host 2: $C2"
run "block of data" dd if=/dev/urandom of="$WORK/blk" bs=4096 count=1 status=none
wr() { nvme io-passthru "$1" --opcode=0x01 --namespace-id=1 --data-len=4096 --cdw12=$NLB -w --input-file="$WORK/blk" 2>&1; }
rd() { nvme io-passthru "$1" --opcode=0x02 --namespace-id=1 --data-len=4096 --cdw12=$NLB -r > /dev/null 2>&1; }
conflicts() { _o=$(wr "$1"); echo "$_o"; echo "$_o" | grep -qiE "reservation.conflict|0x4083|0x83"; }

run "host 1 registers key 0xA1" nvme resv-register $C1 -n 1 --nrkey=0xA1 --rrega=0
run "host 2 registers key 0xB2" nvme resv-register $C2 -n 1 --nrkey=0xB2 --rrega=0
run "host 1 acquires Write Exclusive" nvme resv-acquire $C1 -n 1 --crkey=0xA1 --rtype=1 --racqa=0
expect "report: type 1, two registrants" '"rtype"[": ]+1' nvme resv-report $C2 -n 1 --eds -o json
expect "report lists both registrants" '"regctl"[": ]+2' nvme resv-report $C2 -n 1 --eds -o json
run "host 1 (holder) writes" wr $C1
run "host 2 reads" rd $C2
run "host 2's write conflicts" conflicts $C2
run "wrong key: acquire refused" sh -c "! nvme resv-acquire $C2 -n 1 --crkey=0xBAD --rtype=1 --racqa=0"
run "host 2 preempts host 1" nvme resv-acquire $C2 -n 1 --crkey=0xB2 --prkey=0xA1 --rtype=1 --racqa=1
run "host 1's write now conflicts" conflicts $C1
run "host 2 writes" wr $C2
expect "report: one registrant left" '"regctl"[": ]+1' nvme resv-report $C1 -n 1 --eds -o json
run "host 2 releases" nvme resv-release $C2 -n 1 --crkey=0xB2 --rtype=1 --rrela=0
run "host 1 writes again" wr $C1
run "host 2 unregisters" nvme resv-register $C2 -n 1 --crkey=0xB2 --rrega=1
expect "disconnect" "disconnected 2 controller" nvme disconnect -n "$NQN"
stop_bg target
check "no panic in the target log" "! grep -q panicked '$LOG/target.log'"
echo "reservations with the kernel host: all checks passed"
