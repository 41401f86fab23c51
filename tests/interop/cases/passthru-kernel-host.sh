# Passthru subsystem (issue 28, item 1) against the Linux 6.12 host. qemu gives the guest an
# emulated NVMe SSD (tests/interop/run: `-device nvme` with a conventional namespace, NSID 1,
# and a zoned one, NSID 2, `zoned=true`); nvmf-target in the guest exports that controller
# whole as a passthru subsystem over NVMe/TCP and NVMe/RDMA (rxe0), with `clear_ids` since the
# same kernel sees the drive locally. The kernel host sees the drive's model, serial and
# firmware (and our controller id and NQN), reads its SMART and firmware logs and decoded
# Identify through the fabric; Format NVM, not allowed by default, fails with Invalid Command
# Opcode without reaching the drive. On the conventional namespace a verifying fio job (I/O
# through io_uring NVMe passthrough on /dev/ng0n1); on the zoned one `nvme zns report-zones`,
# a zone append (the LBA written comes back), a zone reset and fio `zonemode=zbd` with verify.
# Then the same drive over RDMA: Identify and a verifying fio job. Last, the drive's first
# namespace as an ordinary block namespace with `io_path: passthru` (item 2: the block
# operations sent as NVMe commands through io_uring passthrough on /dev/ng0n1): a verifying
# fio job, a discard (Dataset Management) and zeroing (Write Zeroes) read back. Clean logs.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:passthru-ssd
NQN2=nqn.2024-01.io.nvmf-rs:passthru-blk
T="$BIN/nvmf-target"
CFG="$WORK/pt.yaml"
export NO_COLOR=1

cleanup() {
  nvme disconnect -n "$NQN" > /dev/null 2>&1
  nvme disconnect -n "$NQN2" > /dev/null 2>&1
  stop_bg target
  stop_bg target2
  # Later cases must not meet a local NVMe controller.
  rmmod nvme 2> /dev/null
}
trap cleanup EXIT

run "the NVMe PCI driver" modprobe nvme
LOCAL=
_n=150
while [ $_n -gt 0 ]; do
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/transport" 2>/dev/null)" = pcie ] && LOCAL=/dev/${_c##*/}
  done
  [ -n "$LOCAL" ] && [ -c "/dev/ng${LOCAL#/dev/nvme}n2" ] && break
  sleep 0.2
  _n=$((_n - 1))
done
[ -n "$LOCAL" ] || { echo "FAIL: qemu's NVMe controller did not appear (is the run's -device nvme there?)"; exit 1; }
echo "local controller $LOCAL: $(ls /dev/ng${LOCAL#/dev/nvme}n* 2>/dev/null | tr '\n' ' ')"
MODEL=$(nvme id-ctrl "$LOCAL" | sed -n 's/^mn *: *//p' | sed 's/ *$//')
SERIAL=$(nvme id-ctrl "$LOCAL" | sed -n 's/^sn *: *//p' | sed 's/ *$//')
FW=$(nvme id-ctrl "$LOCAL" | sed -n 's/^fr *: *//p' | sed 's/ *$//')
echo "drive: model '$MODEL' serial '$SERIAL' firmware '$FW'"
[ -n "$MODEL" ] && [ -n "$SERIAL" ] || { echo "FAIL: cannot read the local drive's identity"; exit 1; }

cat > "$CFG" <<YAML
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] }
  - { portid: 2, trtype: rdma, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4421", subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allow_any_host: true
    passthru:
      device_path: $LOCAL
      clear_ids: true
YAML
start_bg target "$T" --config "$CFG"
wait_port "$GUEST_IP" 4420 120
run "RDMA port on rxe0" wait_log target "port 2 rdma at $GUEST_IP:4421"

# fabric_ctrl: the fabric controller of NQN (its character device).
fabric_ctrl() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] && { echo "/dev/${_c##*/}"; return 0; }
  done
  return 1
}

run "connect over TCP" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN"
DEV1=/dev/$(wait_nvme_ns "$NQN" 1 60) || { echo "FAIL: namespace 1 has no disk"; exit 1; }
CTRL=$(fabric_ctrl) || { echo "FAIL: no controller of $NQN"; exit 1; }
echo "fabric controller $CTRL, namespace 1 $DEV1"
expect "the drive's model" "^mn +: $MODEL" nvme id-ctrl "$CTRL"
expect "the drive's serial" "^sn +: $SERIAL" nvme id-ctrl "$CTRL"
expect "the drive's firmware" "^fr +: $FW" nvme id-ctrl "$CTRL"
expect "our subsystem NQN" "^subnqn +: $NQN" nvme id-ctrl "$CTRL"
expect "decoded Identify (-H)" "Keep Alive Support|Firmware Activate Without Reset|Sanitize" nvme id-ctrl -H "$CTRL"
expect "SMART log from the drive" "[Tt]emperature" nvme smart-log "$CTRL"
expect "firmware log from the drive" "frs1" nvme fw-log "$CTRL"
expect_fail "Format NVM is not allowed" "Invalid Command Opcode|INVALID_OPCODE|0x4001|0x1\b" \
  nvme format "$DEV1" --force

run "fio verify on namespace 1 (TCP)" fio --name=pt-tcp --filename="$DEV1" --direct=1 \
  --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 --size=32M --verify=crc32c \
  --do_verify=1 --verify_fatal=1 --output="$LOG/fio-tcp.txt"
grep -E "err=|READ:|WRITE:" "$LOG/fio-tcp.txt"
check "fio (TCP) reported no error" "grep -q 'err= 0' '$LOG/fio-tcp.txt'"

# The zoned namespace: the host must see it as host-managed zones.
DEV2=/dev/$(wait_nvme_ns "$NQN" 2 60) || { echo "FAIL: namespace 2 has no disk"; exit 1; }
expect "namespace 2 is zoned" "host-managed" cat "/sys/block/${DEV2#/dev/}/queue/zoned"
expect "report zones: 8 empty zones of 8 MiB" "nr_zones: 8" nvme zns report-zones "$DEV2" -d 2
expect "zone 0 empty" "SLBA: +0 +WP: +0 " nvme zns report-zones "$DEV2" -d 1
run "one block of data" dd if=/dev/urandom of="$WORK/blk" bs=4096 count=1 status=none
expect "zone append to zone 0" "Success appended data to LBA|appended data to LBA" \
  nvme zns zone-append "$DEV2" --zslba=0 --data-size=4096 --data="$WORK/blk"
expect "a second append lands after the first" "LBA 0*[18]\b|LBA 0x[18]\b" \
  nvme zns zone-append "$DEV2" --zslba=0 --data-size=4096 --data="$WORK/blk"
expect "reset zone 0" "Success|success" nvme zns reset-zone "$DEV2" --start-lba=0
run "fio zonemode=zbd verify on namespace 2" fio --name=pt-zbd --filename="$DEV2" --direct=1 \
  --ioengine=libaio --zonemode=zbd --rw=write --bs=16k --iodepth=1 --size=16M \
  --verify=crc32c --do_verify=1 --verify_fatal=1 --output="$LOG/fio-zbd.txt"
grep -E "err=|READ:|WRITE:" "$LOG/fio-zbd.txt"
check "fio (zbd) reported no error" "grep -q 'err= 0' '$LOG/fio-zbd.txt'"
run "disconnect TCP" nvme disconnect -n "$NQN"

run "connect over RDMA" nvme connect -t rdma -a "$GUEST_IP" -s 4421 -n "$NQN"
DEV1=/dev/$(wait_nvme_ns "$NQN" 1 60) || { echo "FAIL: namespace 1 has no disk over RDMA"; exit 1; }
CTRL=$(fabric_ctrl) || { echo "FAIL: no controller of $NQN over RDMA"; exit 1; }
expect "RDMA: the drive's model" "^mn +: $MODEL" nvme id-ctrl "$CTRL"
run "fio verify on namespace 1 (RDMA)" fio --name=pt-rdma --filename="$DEV1" --direct=1 \
  --ioengine=libaio --rw=randrw --bs=64k --iodepth=8 --size=16M --verify=crc32c \
  --do_verify=1 --verify_fatal=1 --output="$LOG/fio-rdma.txt"
check "fio (RDMA) reported no error" "grep -q 'err= 0' '$LOG/fio-rdma.txt'"
run "disconnect RDMA" nvme disconnect -n "$NQN"
run "target log clean" log_clean target
run "stop the passthru target" stop_bg target

# io_path: passthru on a block namespace of the same drive: its conventional namespace (the
# disk's name need not be nvme0n1: the driver names disks in the order it finds them).
LOCALB=/dev/$(nvme_ns_dev "$(cat "/sys/class/nvme/${LOCAL#/dev/}/subsysnqn")" 1) ||
  { echo "FAIL: no local disk of NSID 1"; exit 1; }
echo "local disk of NSID 1: $LOCALB"
cat > "$WORK/blk.yaml" <<YAML
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN2] }
subsystems:
  - nqn: $NQN2
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $LOCALB, io_path: passthru }
YAML
start_bg target2 "$T" --config "$WORK/blk.yaml"
wait_port "$GUEST_IP" 4420 120
run "the namespace takes the passthrough path" wait_log target2 "I/O by io_uring NVMe passthrough"
run "connect (block namespace, io_path passthru)" nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN2"
DEVB=/dev/$(wait_nvme_ns "$NQN2" 1 60) || { echo "FAIL: the block namespace has no disk"; exit 1; }
run "fio verify (io_path passthru)" fio --name=pt-blk --filename="$DEVB" --direct=1 \
  --ioengine=libaio --rw=randrw --bs=16k --iodepth=16 --size=32M --verify=crc32c \
  --do_verify=1 --verify_fatal=1 --output="$LOG/fio-blk.txt"
check "fio (io_path passthru) reported no error" "grep -q 'err= 0' '$LOG/fio-blk.txt'"
run "ones written" sh -c "tr '\\000' '\\377' < /dev/zero | dd of='$DEVB' bs=1M count=2 oflag=direct iflag=fullblock status=none"
run "zero the first MiB (Write Zeroes)" blkdiscard -z -o 0 -l 1048576 "$DEVB"
run "it reads back as zeroes" sh -c "dd if='$DEVB' bs=1M count=1 iflag=direct status=none | cmp -n 1048576 - /dev/zero"
run "the second MiB still holds ones" sh -c "dd if='$DEVB' bs=1M skip=1 count=1 iflag=direct status=none | tr -d '\\377' | wc -c | grep -qx 0"
run "discard the second MiB (Dataset Management)" blkdiscard -o 1048576 -l 1048576 "$DEVB"
run "disconnect" nvme disconnect -n "$NQN2"
run "target log clean (io_path passthru)" log_clean target2
