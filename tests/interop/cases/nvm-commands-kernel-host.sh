# Compare, Copy, Verify, fused Compare and Write and the NVMe 2.0 logs (issue 28, item 3) against nvmf-target in
# the guest: a file, a RAM and an RBD namespace (the private Ceph cluster) of one subsystem on
# an NVMe/TCP and an NVMe/RDMA port (rxe0). The kernel host (nvme connect over TCP) runs
# nvme-cli's `compare` (a match, a miscompare), `copy` (two source ranges, one overlapping the
# destination; read back with O_DIRECT and compared with what the sources held) and `verify`
# (a range, and one past the end: LBA Out of Range) on each namespace, and reads the Copy and
# Verify support nvme-cli reports (ONCS, FUSES, OCFS, MSSRL/MCL/MSRC). nvme-cli cannot fuse two
# commands, so our host sends the pair (`nvmf-initiator compare-write`) over TCP and RDMA: a
# match replaces the blocks, a miscompare changes nothing (exit 1, Compare Failure and Command
# Aborted due to Failed Fused Command), and two hosts racing on one range with the same
# expected data: exactly one wins, and the blocks hold the winner's data. Clean target log.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:nvm-commands
T="$BIN/nvmf-target"
I="$BIN/nvmf-initiator"
CFG="$WORK/nvm.yaml"
CLUSTER="$INTEROP/../../scripts/ceph-test-cluster"
CEPH=$WORK/ceph
export NO_COLOR=1

cleanup() {
  [ -d "$CEPH/log" ] && cp -r "$CEPH/log" "$LOG/ceph-log"
  "$CLUSTER" stop "$CEPH" > /dev/null 2>&1
}
trap cleanup EXIT

echo "+ $CLUSTER start $CEPH 3300 32M"
if ! timeout 600 "$CLUSTER" start "$CEPH" 3300 32M; then
  echo "FAIL: the Ceph test cluster did not start within 600 s (log tails above)"
  exit 1
fi
run "backing file (32 MiB)" truncate -s 32M "$WORK/ns1.img"
cat > "$CFG" <<EOF
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] }
  - { portid: 2, trtype: rdma, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4421", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $WORK/ns1.img }
      - { nsid: 2, device_path: "ram:32M" }
      - { nsid: 3, device_path: "rbd:rbd/img", ceph_conf: $CEPH/ceph.conf }
EOF
start_bg target "$T" --config "$CFG"
wait_port "$GUEST_IP" 4420 120
run "RDMA port on rxe0" wait_log target "port 2 rdma at $GUEST_IP:4421"
run "connect" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN"
for ns in 1 2 3; do
  wait_nvme_ns "$NQN" $ns 60 > /dev/null || { echo "FAIL: namespace $ns has no disk"; exit 1; }
done
DEV1=/dev/$(nvme_ns_dev "$NQN" 1)
# The controller's character device (under native multipath a disk's device is the subsystem).
CTRL=
for _c in /sys/class/nvme/nvme*; do
  [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] && CTRL=/dev/${_c##*/}
done
[ -n "$CTRL" ] || { echo "FAIL: no controller of $NQN"; exit 1; }
echo "controller $CTRL"
expect "ONCS: Verify and Copy" "oncs +: 0x1[0-9a-f][0-9a-f]" sh -c "nvme id-ctrl $CTRL | grep -i '^oncs'"
expect "ONCS decoded: Copy supported" "Copy Supported" nvme id-ctrl -H "$CTRL"
expect "FUSES: Compare and Write" "fuses +: 0x1" sh -c "nvme id-ctrl $CTRL | grep -i '^fuses'"
expect "OCFS: format 0h" "ocfs +: 0x1" sh -c "nvme id-ctrl $CTRL | grep -i '^ocfs'"
expect "MSRC 255 (256 ranges)" "msrc +: 255" sh -c "nvme id-ns $DEV1 | grep -i '^msrc'"

# blk DEV LBA COUNT FILE: COUNT blocks of DEV from LBA into FILE, bypassing the page cache.
blk() { dd if="$1" of="$4" bs="$BS" skip="$2" count="$3" iflag=direct status=none; }

for ns in 1 2 3; do
  DEV=/dev/$(nvme_ns_dev "$NQN" $ns)
  BS=$(cat "/sys/block/${DEV#/dev/}/queue/logical_block_size")
  BLOCKS=$(( $(cat "/sys/block/${DEV#/dev/}/size") * 512 / BS ))
  echo "namespace $ns: $DEV, $BS-byte blocks, $BLOCKS blocks"
  run "ns $ns: 64 blocks of data" dd if=/dev/urandom of="$WORK/d$ns" bs="$BS" count=64 status=none
  run "ns $ns: written at block 0" dd if="$WORK/d$ns" of="$DEV" bs="$BS" oflag=direct status=none
  run "ns $ns: blocks 0-7 expected" dd if="$WORK/d$ns" of="$WORK/e$ns" bs="$BS" count=8 status=none
  expect "ns $ns: compare matches" "compare: Success" \
    nvme compare "$DEV" --start-block=0 --block-count=7 --data-size=$((8 * BS)) --data="$WORK/e$ns"
  run "ns $ns: other data" dd if=/dev/urandom of="$WORK/x$ns" bs="$BS" count=8 status=none
  expect_fail "ns $ns: compare miscompares" "COMPARE_FAILED|Compare Failure|0x285|0x4285" \
    nvme compare "$DEV" --start-block=0 --block-count=7 --data-size=$((8 * BS)) --data="$WORK/x$ns"
  # Sources 0-15 and 32-39 to 8: the destination overlaps the first source; the result is
  # the sources as they were before the command.
  run "ns $ns: copy" nvme copy "$DEV" --sdlba=8 --slbs=0,32 --blocks=15,7
  run "ns $ns: expected copy" sh -c "{ dd if='$WORK/d$ns' bs=$BS count=16 status=none; \
    dd if='$WORK/d$ns' bs=$BS skip=32 count=8 status=none; } > '$WORK/c$ns'"
  run "ns $ns: blocks 8-31 read back" blk "$DEV" 8 24 "$WORK/r$ns"
  if ! cmp "$WORK/c$ns" "$WORK/r$ns"; then
    for _b in 0 1 8 16 32; do echo "d$ns block $_b: $(dd if="$WORK/d$ns" bs=$BS skip=$_b count=1 status=none | od -An -tx1 -N8)"; done
    for _b in 0 8 16; do echo "read back block $_b: $(dd if="$WORK/r$ns" bs=$BS skip=$_b count=1 status=none | od -An -tx1 -N8)"; done
    "$I" read -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --nsid $ns --lba 8 --count 1 --output "$WORK/o$ns"
    echo "our host reads block 8: $(od -An -tx1 -N8 "$WORK/o$ns")"
    echo "FAIL: ns $ns: the copy holds the sources"
    exit 1
  fi
  run "ns $ns: block 0-7 untouched" sh -c "blk() { dd if='$DEV' bs=$BS count=8 iflag=direct status=none; }; blk | cmp - '$WORK/e$ns'"
  expect "ns $ns: verify" "Verify Success|verify: Success|Success" \
    nvme verify "$DEV" --start-block=0 --block-count=255
  expect_fail "ns $ns: verify past the end" "LBA_RANGE|LBA Out of Range|0x80|0x4080" \
    nvme verify "$DEV" --start-block=$((BLOCKS - 1)) --block-count=1
done

# The logs an NVMe 2.0 host reads (issue 28, item 3): what is listed is served; SMART counts
# the I/O above (Data Units Written in 1000s of 512-byte units, rounded up).
expect "supported log pages: SMART" "LID 0x2 .*supports 0x1" nvme supported-log-pages "$CTRL"
expect "supported log pages: itself and LID 12h" "LID 0x12 .*supports 0x1" nvme supported-log-pages "$CTRL"
expect "feature 07h (Number of Queues), controller scope" "FID 07 -> Support Effects Log: 00200001" nvme fid-support-effects-log "$CTRL"
expect "SMART: data units written counted" "[Dd]ata [Uu]nits [Ww]ritten[^:]*: *[1-9]" nvme smart-log "$CTRL"
expect "SMART: host write commands counted" "[Hh]ost[ _][Ww]rite[ _][Cc]ommands[^:]*: *[1-9]" nvme smart-log "$CTRL"

# Fused Compare and Write from our host, on namespace 2 (RAM) and 3 (RBD), over both fabrics.
for fab in "tcp 4420" "rdma 4421"; do
  set -- $fab
  C="-t $1 -a $GUEST_IP -s $2 -n $NQN"
  for ns in 2 3; do
    DEV=/dev/$(nvme_ns_dev "$NQN" $ns)
    BS=$(cat "/sys/block/${DEV#/dev/}/queue/logical_block_size")
    # On RBD one 512-byte block: the pair goes to librbd's compare-and-write (one OSD
    # operation, atomic for every gateway); on RAM eight blocks under the range lock.
    N=8
    [ $ns = 3 ] && N=1
    run "$1 ns $ns: old data" dd if=/dev/urandom of="$WORK/old" bs="$BS" count=$N status=none
    run "$1 ns $ns: new data" dd if=/dev/urandom of="$WORK/new" bs="$BS" count=$N status=none
    run "$1 ns $ns: old data written at block 100" dd if="$WORK/old" of="$DEV" bs="$BS" seek=100 oflag=direct status=none
    expect "$1 ns $ns: compare-write on a match" "compare: Success" \
      "$I" compare-write $C --nsid $ns --start-block 100 --expected "$WORK/old" --data "$WORK/new"
    run "$1 ns $ns: the blocks hold the new data" sh -c "dd if='$DEV' bs=$BS skip=100 count=$N iflag=direct status=none | cmp - '$WORK/new'"
    expect_fail "$1 ns $ns: compare-write on a mismatch" "Compare Failure" \
      "$I" compare-write $C --nsid $ns --start-block 100 --expected "$WORK/old" --data "$WORK/old"
    run "$1 ns $ns: nothing written on the mismatch" sh -c "dd if='$DEV' bs=$BS skip=100 count=$N iflag=direct status=none | cmp - '$WORK/new'"
    # Two hosts race on the range with the same expected data: exactly one wins.
    run "$1 ns $ns: data A" dd if=/dev/urandom of="$WORK/a" bs="$BS" count=$N status=none
    run "$1 ns $ns: data B" dd if=/dev/urandom of="$WORK/b" bs="$BS" count=$N status=none
    "$I" compare-write $C --nsid $ns --start-block 100 --expected "$WORK/new" --data "$WORK/a" \
      -q nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000a1 \
      -I 00000000-0000-4000-8000-0000000000a1 > "$WORK/ra" 2>&1 &
    pa=$!
    "$I" compare-write $C --nsid $ns --start-block 100 --expected "$WORK/new" --data "$WORK/b" \
      -q nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000b2 \
      -I 00000000-0000-4000-8000-0000000000b2 > "$WORK/rb" 2>&1 &
    pb=$!
    wait $pa; ea=$?
    wait $pb; eb=$?
    cat "$WORK/ra" "$WORK/rb"
    echo "host A exit $ea, host B exit $eb"
    check "$1 ns $ns: exactly one host won" "[ \$(( ($ea == 0) + ($eb == 0) )) -eq 1 ]"
    check "$1 ns $ns: the other lost on the compare" "cat '$WORK/ra' '$WORK/rb' | grep -q 'Compare Failure'"
    if [ $ea -eq 0 ]; then win=a; else win=b; fi
    run "$1 ns $ns: the blocks hold the winner's data" sh -c "dd if='$DEV' bs=$BS skip=100 count=$N iflag=direct status=none | cmp - '$WORK/$win'"
  done
done
run "disconnect" nvme disconnect -n "$NQN"
stop_bg target
log_clean target
echo "Compare, Copy, Verify and fused Compare and Write: all checks passed"
