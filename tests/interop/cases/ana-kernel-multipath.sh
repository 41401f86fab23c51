# ANA and native multipath with the Linux host (issue 14): two nvmf-target processes in the
# guest serve one file as one subsystem — node A on port 4420 (controller ids 1-99), node B
# on port 4421 (100-199), the same NQN, serial and namespace identifiers. The kernel host
# connects to both and gets one multipath disk with two optimized paths; a verifying fio job
# runs while node A's ANA group turns inaccessible (`ctl set-ana`: the host learns it from
# the ANA change notice and the ANA log page, and moves I/O to node B) and then node A is
# killed with SIGKILL. fio must finish without an error.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:ana
T="$BIN/nvmf-target"

# node_cfg NAME PORT CNTLID_MIN CNTLID_MAX: writes $WORK/NAME.yaml.
node_cfg() {
  cat > "$WORK/$1.yaml" <<EOF
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "$2", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    cntlid_min: $3
    cntlid_max: $4
    namespaces:
      - { nsid: 1, device_path: $WORK/shared.img }
EOF
}

check "native multipath is on" "[ \"\$(cat /sys/module/nvme_core/parameters/multipath)\" = Y ]"
run "backing file (64 MiB)" truncate -s 64M "$WORK/shared.img"
node_cfg a 4420 1 99
node_cfg b 4421 100 199
start_bg node-a "$T" --config "$WORK/a.yaml" --ctl-socket "$WORK/a.sock"
start_bg node-b "$T" --config "$WORK/b.yaml" --ctl-socket "$WORK/b.sock"
wait_port "$GUEST_IP" 4420
wait_port "$GUEST_IP" 4421
run "connect to node A" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN"
run "connect to node B" nvme connect -t tcp -a "$GUEST_IP" -s 4421 -n "$NQN"
DEV=$(wait_nvme "$NQN") || { echo "FAIL: no namespace disk for $NQN"; exit 1; }
echo "multipath disk: $DEV; paths: $(path_of 4420) $(path_of 4421)"
run "path A optimized" wait_ana 4420 optimized
run "path B optimized" wait_ana 4421 optimized
expect "one subsystem, both paths" "4421" nvme list-subsys
PA=$(path_of 4420) && PB=$(path_of 4421) || { echo "FAIL: a path disk is missing"; exit 1; }
check "both paths belong to the one multipath disk $DEV" "[ ${PA%c*} = ${DEV%n*} ] && [ ${PB%c*} = ${DEV%n*} ] && [ $PA != $PB ]"

start_bg fio fio --name=failover --filename="/dev/$DEV" --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=4k --iodepth=16 --size=96M --verify=crc32c --verify_fatal=1 \
  --do_verify=1 --output-format=terse
sleep 3
run "ctl set-ana: node A group 1 inaccessible" "$T" ctl --socket "$WORK/a.sock" set-ana 1 1 inaccessible
run "the host sees path A inaccessible" wait_ana 4420 inaccessible
check "path B stays optimized" "[ \"\$(cat /sys/block/$(path_of 4421)/ana_state)\" = optimized ]"
sleep 2
run "kill node A (SIGKILL)" kill -KILL "$(cat "$LOG/node-a.pid")"
rm -f "$LOG/node-a.pid"
FIO_PID=$(cat "$LOG/fio.pid")
_n=900
while kill -0 "$FIO_PID" 2>/dev/null && [ "$_n" -gt 0 ]; do sleep 0.2; _n=$((_n - 1)); done
check "fio finished within 3 minutes" "! kill -0 $FIO_PID 2>/dev/null"
wait "$FIO_PID"
FIO_RC=$?
cat "$LOG/fio.log"
check "fio exit status 0 (no I/O error, data verified)" "[ $FIO_RC -eq 0 ]"
check "fio reports no error" "! grep -qiE 'error|verify: bad' '$LOG/fio.log'"
# Terse v3: field 15 is the read and field 56 the write completion latency maximum (us):
# the longest any I/O waited, the ANA change and the node loss included.
echo "failover: longest read $(cut -d';' -f15 "$LOG/fio.log") us, longest write $(cut -d';' -f56 "$LOG/fio.log") us"
rm -f "$LOG/fio.pid"
expect "disconnect" "disconnected 2 controller" nvme disconnect -n "$NQN"
stop_bg node-b
log_clean node-b
echo "ANA failover and node loss under the kernel's native multipath: all checks passed"
