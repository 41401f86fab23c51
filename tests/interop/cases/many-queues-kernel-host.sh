# Many I/O queues (issue 15): the kernel host asks nvmf-target (in the guest) for 64 I/O
# queues over NVMe/TCP and over NVMe/RDMA (rxe0), gets them (the target grants up to 128
# by default, as nvmet and SPDK), and runs a verifying fio job with 8 jobs spread over
# them; the target's log stays clean.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:queues
run "backing file (64 MiB)" truncate -s 64M "$WORK/disk.img"
for tr in tcp rdma; do
  cat > "$WORK/$tr.yaml" <<EOF
ports:
  - { portid: 1, trtype: $tr, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $WORK/disk.img }
EOF
  start_bg "target-$tr" "$BIN/nvmf-target" --config "$WORK/$tr.yaml" --ctl-socket "$WORK/$tr.sock"
  run "$tr target listening" wait_log "target-$tr" "port 1 $tr at $GUEST_IP:4420"
  run "$tr: connect with 64 I/O queues" nvme connect -t "$tr" -a "$GUEST_IP" -s 4420 -n "$NQN" --nr-io-queues=64
  DEV=$(wait_nvme "$NQN") || { echo "FAIL: no namespace disk for $NQN"; exit 1; }
  # The host creates min(64, CPUs) queues of each kind; the target must have granted
  # them all: its status counts the queues the host connected.
  expect "$tr: the target granted and connected the host's I/O queues" " [1-9][0-9]* I/O queue" \
    "$BIN/nvmf-target" ctl --socket "$WORK/$tr.sock" status
  check "$tr: the kernel asked for 64 and was not refused" "dmesg | grep -q 'mapped .*/.*/.* default/read/poll queues'"
  expect "$tr: fio, 8 jobs, verify" "err= 0" fio --name="q-$tr" --filename="/dev/$DEV" --rw=randrw \
    --bs=4k --iodepth=8 --numjobs=8 --size=4M --offset_increment=4M --ioengine=libaio --direct=1 \
    --verify=crc32c --verify_fatal=1 --group_reporting
  expect "$tr: disconnect" "disconnected 1 controller" nvme disconnect -n "$NQN"
  stop_bg "target-$tr"
  log_clean "target-$tr"
done
echo "64 I/O queues over TCP and RDMA from the kernel host: all checks passed"
