# map --ublk stays up across a target restart (issue 14): nvmf-target in the guest (NVMe/TCP, a
# file namespace on tmpfs), `nvmf-initiator map -t tcp --ublk --reconnect-delay 1`; a fio job
# with verification runs through /dev/ublkbN while the target is killed with SIGKILL and started
# again on the same address: the queues take the reconnected controller's queues, the requests
# in flight are sent again, fio finishes with no error and every block verifies; the device was
# never removed.
. "$INTEROP/lib.sh"
I="$BIN/nvmf-initiator"
T="$BIN/nvmf-target"
NQN=nqn.2024-01.io.nvmf-rs:ublk-reconnect
U=00000000-0000-4000-8000-0000000000b2
run "ublk driver" modprobe ublk_drv
run "backing file" truncate -s 128M "$WORK/disk.img"
cat > "$WORK/t.yaml" <<YAML
ports:
  - { portid: 1, trtype: tcp, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces: [ { nsid: 1, device_path: $WORK/disk.img } ]
YAML
start_bg target "$T" --config "$WORK/t.yaml" --ctl-socket "$WORK/ctl.sock"
wait_port "$GUEST_IP" 4420
start_bg map "$I" map -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" -q "nqn.2014-08.org.nvmexpress:uuid:$U" \
  -I "$U" -i 2 -Q 64 --ublk --reconnect-delay 1 --ctrl-loss-tmo 60
wait_log map "exported as" 30 || { echo "FAIL: map --ublk did not come up"; exit 1; }
DEV=$(sed -n 's|.* exported as /dev/\(ublkb[0-9]*\) .*|\1|p' "$LOG/map.log")
check "a ublk block device was named" "[ -n '$DEV' ]"
wait_block "$DEV" 30
echo "+ fio (4k random writes, verified) in the background"
fio --name=through --filename="/dev/$DEV" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
  --iodepth=16 --size=24M --rate_iops=1500 --verify=crc32c --do_verify=1 --numjobs=1 \
  --output="$WORK/fio.out" > /dev/null 2>&1 &
FIO=$!
sleep 3
run "target killed" kill -9 "$(cat "$LOG/target.pid")"
rm -f "$LOG/target.pid"
sleep 2
check "the device is still there" "[ -e /dev/$DEV ]"
start_bg target2 "$T" --config "$WORK/t.yaml" --ctl-socket "$WORK/ctl.sock"
wait_port "$GUEST_IP" 4420
echo "+ wait for fio"
if ! wait "$FIO"; then cat "$WORK/fio.out"; echo "FAIL: fio failed across the restart"; exit 1; fi
cat "$WORK/fio.out" | grep -E "err=|IOPS=|verify"
check "fio saw no error" "grep -q 'err= 0' '$WORK/fio.out'"
run "fio again after the restart, verified" fio --name=after --filename="/dev/$DEV" --direct=1 \
  --ioengine=libaio --rw=randwrite --bs=64k --iodepth=8 --offset=32M --size=16M --verify=md5 \
  --do_verify=1
stop_bg map
cat "$LOG/map.log" | grep -E "lost|reconnect|stopped" | tail -5
check "a queue saw the loss" "grep -q 'I/O queue lost' '$LOG/map.log'"
check "the stop line counts the reconnect" "grep -qE '^stopped: .* [1-9][0-9]* reconnect' '$LOG/map.log'"
check "no request failed" "grep -qE '^stopped: [0-9]+ requests \(0 failed\)' '$LOG/map.log'"
stop_bg target2
echo "map --ublk across a target restart: all checks passed"
