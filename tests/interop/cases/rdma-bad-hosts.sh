# Bad input over real verbs (rdma-sys on rxe0): connects with a queue size over the target's
# limit are rejected with the NVMe/RDMA status in the CM private data, which the kernel host and
# our host both decode; a host killed in the middle of a perf run ends only its own queues, and
# the target keeps serving: a new perf run with verification passes. A target killed in the
# middle of a perf run makes our host fail within seconds.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:bad-hosts
I="$BIN/nvmf-initiator"
C="-t rdma -a $GUEST_IP -s 4420"
# Admin queues of both hosts have 32 entries; this target accepts 16.
cat > "$WORK/small.yaml" <<EOT
transport: { max_admin_queue_size: 16 }
ports:
  - { portid: 1, trtype: rdma, traddr: "$GUEST_IP", trsvcid: "4420", subsystems: [$NQN] }
subsystems:
  - { nqn: $NQN, allow_any_host: true, namespaces: [ { nsid: 1, device_path: "ram:64M" } ] }
EOT
start_bg small "$BIN/nvmf-target" --config "$WORK/small.yaml"
run "small target listens" wait_log small "port 1 rdma at $GUEST_IP:4420"
check "the kernel host's connect is refused" "! nvme connect -t rdma -a $GUEST_IP -s 4420 -n $NQN"
check "the kernel host decoded the NVMe/RDMA reject" "dmesg | grep -qE 'Connect rejected: .*nvme status 4 '"
check "our host's connect is refused with the reject status" \
  "$I identify $C -n $NQN 2>&1 | tee -a /dev/stderr | grep -q 'NVMe/RDMA reject: invalid host SQ size'"
check "the target logged why" "grep -q 'rejecting NVMe/RDMA connect: invalid host SQ size' '$LOG/small.log'"
check "the target still runs" "kill -0 \$(cat '$LOG/small.pid')"
stop_bg small
# A host that vanishes mid-transfer.
start_bg target "$BIN/nvmf-target" --transport rdma --listen "$GUEST_IP:4420" --nqn "$NQN" --namespace ram:64M
run "target listens" wait_log target "port 1 rdma at $GUEST_IP:4420"
"$I" perf $C -n "$NQN" --rw randrw --bs 64k --iodepth 8 --runtime 30 --size 16M > "$LOG/victim.log" 2>&1 &
VICTIM=$!
run "the victim's queues are up" wait_log target "admin queue connected" 60
sleep 5
run "kill the host mid-transfer" kill -9 $VICTIM
wait $VICTIM 2>/dev/null
run "the target closes the victim's queues" wait_log target "queue closed" 60
expect "a new host gets verified I/O" "errors=0" $I perf $C -n $NQN --rw randrw --bs 4k --iodepth 8 --runtime 3 --size 8M --verify
check "no panic" "! grep -q panicked '$LOG/target.log'"
stop_bg target
# A target that vanishes mid-transfer: our host fails promptly (it reads its connections'
# rdma_cm events when it waits), not only when its command timeouts expire.
start_bg doomed "$BIN/nvmf-target" --transport rdma --listen "$GUEST_IP:4420" --nqn "$NQN" --namespace ram:64M
run "doomed target listens" wait_log doomed "port 1 rdma at $GUEST_IP:4420"
# --ctrl-loss-tmo 0: no reconnect attempts (the default, like the kernel host's, retries
# for 600 s), so the host must fail as soon as it notices.
"$I" perf $C -n "$NQN" --ctrl-loss-tmo 0 --rw randread --bs 4k --iodepth 8 --runtime 60 > "$LOG/orphan.log" 2>&1 &
ORPHAN=$!
run "the host's queues are up" wait_log doomed "admin queue connected" 60
sleep 5
run "kill the target mid-transfer" kill -9 "$(cat "$LOG/doomed.pid")"
rm -f "$LOG/doomed.pid"
_n=0
while kill -0 "$ORPHAN" 2>/dev/null && [ "$_n" -lt 100 ]; do sleep 0.2; _n=$((_n + 1)); done
check "our host gave up within 20 s" "! kill -0 $ORPHAN"
wait "$ORPHAN"
rc=$?
cat "$LOG/orphan.log"
check "and failed with an error" "[ $rc -ne 0 ]"
echo "bad hosts over real verbs: all checks passed"
