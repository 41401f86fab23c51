# Soak (issue 32): the kernel NVMe/TCP host against ONE long-lived nvmf-target in the guest
# (--ctl-socket), rounds of subsystem add / I/O / reset / reconnect / remove until a time budget
# is spent: SOAK_MINUTES (the runner forwards it; e.g. 20) or about 2 minutes by default.
#
# The target's buffer arena is about the smallest it takes (4 MiB + 256 KiB), so transfers of
# every size class compete for it. A base subsystem (RAM namespace) stays connected the whole
# time; first, 1 MiB transfers fill the fresh arena and then 513, 511, 1, 8 and 129 blocks must
# be served (issue 32's hang: a size class not used before waited forever). The base namespace
# gets a verifying fio job in every round. Each round:
#   - adds subsystem soak-rN live with namespaces on a loop device (losetup over a file on
#     /scratch), on a file and in RAM (ram:64M): in odd rounds the config is edited +
#     `ctl reload` (loop and file) and the RAM namespace comes with `ctl add-ns` after the
#     connect; in even rounds with `ctl add-subsystem`, `add-ns` x 3 and `link-subsystem`;
#     the configuration file holds what ctl changed;
#   - `nvme connect`, without digests in odd rounds, with --hdr-digest --data-digest in even ones;
#   - nvme-cli passthru writes and reads of odd block counts (1, 7, 255, 256, 511, 512, 513,
#     1023, 2047, MDTS, and three more in turn from 2 to 1537) on every namespace at odd start
#     blocks, each read back and compared (and compared with the backing file of the file and
#     loop namespaces), while a fio --verify=crc32c job with odd block sizes (bsrange /
#     bssplit beyond MDTS, so the kernel splits them) runs on the rest of each namespace;
#   - a controller reset (`nvme reset`) under fio (rounds 1, 4, ...) or while idle (2, 5, ...,
#     then one namespace's passthru writes read back);
#   - disconnect, reconnect with the other digest setting, every passthru write read back
#     again (passthru and O_DIRECT through the disk), a second verifying fio job;
#   - odd rounds: the RAM namespace removed with `ctl remove-ns` (the host sees it go),
#     disconnect, the subsystem removed with the config edited + `ctl reload`; even rounds:
#     disconnect, `ctl remove-subsystem`; it is gone from `ctl status` and the config file,
#     and the target lets go of the loop device and the file.
# Fails on any I/O error or data mismatch, a kernel "I/O tag ... timeout" (or any nvme timeout
# or I/O error in dmesg), a `stuck command` line in the target's log (the stuck-command
# watchdog), an error or panic in the target's log (its warnings are listed, not failures:
# "not exported on any port" while an even round's subsystem is built). Ends with one
# summary line: rounds, passthru commands, fio I/Os, sizes, elapsed time, and
# longest_command_ms / stuck_commands from `ctl status` (n/a when the target has no such counter).
. "$INTEROP/lib.sh"
T="$BIN/nvmf-target"
CTL="$WORK/ctl.sock"
CFG="$WORK/soak.yaml"
BASE=nqn.2024-01.io.nvmf-rs:soak-base
PFX=nqn.2024-01.io.nvmf-rs:soak-r
if [ -n "${SOAK_MINUTES:-}" ]; then BUDGET=$((SOAK_MINUTES * 60)); else BUDGET=120; fi
# At least this many rounds whatever the budget: both digest settings, both kinds of reset.
MIN_ROUNDS=2
# Passthru block counts: these in every round (capped at MDTS, which is added too), and
# PT_EXTRA_PER_ROUND of PT_EXTRA in turn.
PT_COUNTS="1 7 255 256 511 512 513 1023 2047"
PT_EXTRA="2 8 9 63 64 65 127 129 1024 1025 1537"
PT_EXTRA_PER_ROUND=3
# Passthru region at the start of each namespace (blocks); fio runs beyond it.
PT_REGION_MB=8
NS_MB=64
# The poll group's data buffer arena (64 MiB by default): the smallest the target takes with
# 1 MiB transfers (4 x MDTS), so buffers of every size class compete for it, plus an uneven
# tail of 256 KiB (smaller than a 513-block transfer).
ARENA_BYTES=$((4 * 1024 * 1024 + 256 * 1024))
# Bytes each fio job writes (and verifies) per namespace, after the passthru region.
FIO_MB=16

START=$(date +%s)
DMESG0=$(dmesg | wc -l)
ROUNDS=0
PT=0
FIO_IOS=0
FIO_JOBS=0
RESETS=0
RECONNECTS=0
PT_SIZES=""
FIO_BS=""

elapsed() { echo $(( $(date +%s) - START )); }

# status_field NAME max|sum: transport counter NAME from `ctl status` ("NAME VALUE" among a
# transport line's counters), the largest or the sum over transports; n/a when the target
# does not report it (the stuck-command watchdog's counters are newer than this case).
status_field() {
  "$T" ctl --socket "$CTL" status 2>/dev/null | grep '^transport ' |
    awk -v k="$1" -v how="$2" '{
        for (i = 1; i < NF; i++) {
          f = $i; sub(/[:,=]$/, "", f)
          if (f != k) continue
          v = $(i + 1); sub(/,$/, "", v); v += 0; n++
          if (how == "max") { if (v > s) s = v } else s += v
        }
      }
      END { if (n) print s; else print "n/a" }'
}

# diagnose: what a failure needs next to it.
diagnose() {
  echo "--- ctl status"
  "$T" ctl --socket "$CTL" status 2>&1 | tail -n 30
  echo "--- dmesg (nvme, new)"
  dmesg | tail -n +$((DMESG0 + 1)) | grep -iE 'nvme|blk|I/O' | tail -n 40
  echo "--- target log (tail)"
  tail -n 40 "$LOG/target.log"
}

fail() {
  echo "FAIL: $* (round $ROUNDS, after $(elapsed) s)"
  diagnose
  exit 1
}

# health: the failure conditions that are not a command's exit status.
health() {
  if grep -n 'stuck command' "$LOG/target.log"; then fail "the target logged a stuck command"; fi
  if grep -nE 'ERROR|panicked' "$LOG/target.log"; then fail "the target logged an error or a panic"; fi
  if dmesg | tail -n +$((DMESG0 + 1)) | grep -iE 'I/O tag .* timeout|nvme.*timeout|I/O error, dev nvme|nvme.*(I/O|command) .*error'; then
    fail "the kernel logged an nvme timeout or I/O error"
  fi
  kill -0 "$(cat "$LOG/target.pid")" 2>/dev/null || fail "the target is gone"
}

# config SUB-NQN-OR-EMPTY NAMESPACE...: writes $CFG: one TCP port, the base subsystem, and
# when given, the round's subsystem with the "NSID:PATH" namespaces.
config() {
  _sub=$1
  shift
  {
    echo "tcp: { arena_bytes: $ARENA_BYTES }"
    echo "ports:"
    if [ -n "$_sub" ]; then _subs="$BASE, $_sub"; else _subs=$BASE; fi
    echo "  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: \"4420\", subsystems: [$_subs] }"
    echo "subsystems:"
    echo "  - nqn: $BASE"
    echo "    allow_any_host: true"
    echo "    namespaces:"
    echo "      - { nsid: 1, device_path: \"ram:32M\" }"
    if [ -n "$_sub" ]; then
      echo "  - nqn: $_sub"
      echo "    allow_any_host: true"
      echo "    namespaces:"
      for _ns in "$@"; do
        echo "      - { nsid: ${_ns%%:*}, device_path: \"${_ns#*:}\" }"
      done
    fi
  } > "$CFG"
}

# ns_disk NQN NSID: the disk (nvmeXnY) of namespace NSID of NQN, if the host has it.
ns_disk() {
  for _b in /sys/block/nvme*; do
    case ${_b##*/} in nvme*c*n*) continue ;; esac
    [ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    [ "$(cat "$_b/nsid" 2>/dev/null)" = "$2" ] && [ "$(cat "$_b/size" 2>/dev/null || echo 0)" -gt 0 ] &&
      { basename "$_b"; return 0; }
  done
  return 1
}

# wait_ns NQN NSID present|absent [SECS]
wait_ns() {
  _n=$(( ${4:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    if ns_disk "$1" "$2" > /dev/null; then [ "$3" = present ] && return 0
    else [ "$3" = absent ] && return 0
    fi
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "namespace $2 of $1 is not $3 after ${4:-30} s" >&2
  return 1
}

# ctrl_of NQN: the kernel's controller (nvmeX) connected to NQN.
ctrl_of() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$1" ] && { basename "$_c"; return 0; }
  done
  return 1
}

# wait_live CTRL [SECS]: waits until the controller's state is live.
wait_live() {
  _n=$(( ${2:-60} * 5 ))
  while [ "$_n" -gt 0 ]; do
    [ "$(cat "/sys/class/nvme/$1/state" 2>/dev/null)" = live ] && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "$1 is '$(cat "/sys/class/nvme/$1/state" 2>/dev/null)', not live" >&2
  return 1
}

# connect NQN DIGEST-OPTIONS...: nvme connect to our target (the caller waits for the disks).
connect() {
  _nqn=$1
  shift
  echo "+ nvme connect -n $_nqn $*"
  nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$_nqn" "$@" || fail "connect $_nqn $*"
}

# The round's RAM namespace.
RAM_NS="ram:${NS_MB}M"

# pt_counts MAXBLOCKS: the round's passthru block counts, capped at MAXBLOCKS, plus MAXBLOCKS.
pt_counts() {
  _extra=$(echo "$PT_EXTRA" | awk -v r="$ROUNDS" -v k="$PT_EXTRA_PER_ROUND" \
    '{ for (i = 0; i < k; i++) printf "%s ", $(((r - 1) * k + i) % NF + 1) }')
  for _c in $PT_COUNTS $_extra "$1"; do [ "$_c" -le "$1" ] && echo "$_c"; done | awk '!seen[$1]++'
}

# pt_write_all NSID DISK BACKING: one passthru write per block count at odd start blocks
# (data: a slice of the round's pattern), each read back and compared; then the backing file
# (if any) holds the same bytes. Remembers start/count/data in $WORK/pt-NSID.
pt_write_all() {
  _nsid=$1 _disk=$2 _back=$3
  _lbs=$(cat "/sys/block/$_disk/queue/logical_block_size")
  _max=$(( $(cat "/sys/block/$_disk/queue/max_hw_sectors_kb") * 1024 / _lbs ))
  _region=$(( PT_REGION_MB * 1024 * 1024 / _lbs ))
  _start=$(( (ROUNDS * 3 + _nsid) % 7 + 1 ))
  _k=0
  : > "$WORK/pt-$_nsid"
  for _cnt in $(pt_counts "$_max"); do
    [ $((_start + _cnt)) -le "$_region" ] || break
    _bytes=$((_cnt * _lbs))
    _off=$(( (_k * 4613 + _nsid * 977 + ROUNDS * 131) % 524288 ))
    _data=$WORK/pt-$_nsid-$_k.dat
    tail -c +$((_off + 1)) "$WORK/pattern" | head -c "$_bytes" > "$_data"
    _fua=""
    [ $((_k % 3)) -eq 2 ] && _fua=--force-unit-access
    # shellcheck disable=SC2086 # $_fua: empty or one flag
    _o=$(nvme write "/dev/$_disk" --start-block="$_start" --block-count=$((_cnt - 1)) \
      --data-size="$_bytes" --data="$_data" $_fua 2>&1) ||
      { echo "$_o"; fail "nvme write $_disk start $_start blocks $_cnt ($_bytes bytes)"; }
    PT=$((PT + 1))
    rm -f "$WORK/pt.back"
    _o=$(nvme read "/dev/$_disk" --start-block="$_start" --block-count=$((_cnt - 1)) \
      --data-size="$_bytes" --data="$WORK/pt.back" 2>&1) ||
      { echo "$_o"; fail "nvme read $_disk start $_start blocks $_cnt ($_bytes bytes)"; }
    PT=$((PT + 1))
    cmp "$_data" "$WORK/pt.back" || fail "passthru read of $_disk start $_start blocks $_cnt differs from what was written"
    echo "$_start $_cnt $_data" >> "$WORK/pt-$_nsid"
    case " $PT_SIZES " in *" $_cnt "*) ;; *) PT_SIZES="$PT_SIZES $_cnt" ;; esac
    _start=$((_start + _cnt + 1 + (_k % 5)))
    _k=$((_k + 1))
  done
  echo "  [$(elapsed) s] ns $_nsid ($_disk, $_lbs B blocks, max $_max blocks): $_k passthru writes + reads compared"
  [ -n "$_back" ] || return 0
  while read -r _s _c _d; do
    dd if="$_back" bs=1M iflag=skip_bytes,count_bytes skip=$((_s * _lbs)) count=$((_c * _lbs)) status=none |
      cmp - "$_d" ||
      fail "backing $_back at block $_s ($_c blocks) differs from the passthru write"
  done < "$WORK/pt-$_nsid"
}

# pt_read_all NSID DISK: every passthru write of the round read back again (passthru, one
# command each, and the block device with O_DIRECT) and compared.
pt_read_all() {
  _nsid=$1 _disk=$2
  _lbs=$(cat "/sys/block/$_disk/queue/logical_block_size")
  _k=0
  while read -r _s _c _d; do
    rm -f "$WORK/pt.back"
    _o=$(nvme read "/dev/$_disk" --start-block="$_s" --block-count=$((_c - 1)) \
      --data-size=$((_c * _lbs)) --data="$WORK/pt.back" 2>&1) ||
      { echo "$_o"; fail "nvme read $_disk start $_s blocks $_c"; }
    PT=$((PT + 1))
    cmp "$_d" "$WORK/pt.back" || fail "re-read of $_disk start $_s blocks $_c differs"
    # One read of up to 1 MiB (bs=512 would be one command per block).
    dd if="/dev/$_disk" bs=1M iflag=direct,skip_bytes,count_bytes skip=$((_s * _lbs)) count=$((_c * _lbs)) \
      status=none | cmp - "$_d" ||
      fail "block device read of $_disk start $_s blocks $_c differs"
    _k=$((_k + 1))
  done < "$WORK/pt-$_nsid"
  echo "  [$(elapsed) s] ns $_nsid ($_disk): $_k passthru reads + O_DIRECT reads compared"
}

# fio_start NAME MODE DISK...: a verifying fio job per disk beyond the passthru region, in
# the background, JSON in $WORK/NAME.json. MODE picks the block sizes and pattern.
fio_start() {
  _name=$1 _mode=$2
  shift 2
  _extra=""
  case $_mode in
    # Both I/O queues, 16 in flight each: at least four 1 MiB buffers at once.
    fill) _bs="--bs=1M" _rw=write _extra="--numjobs=2 --size=8M --offset_increment=8M" ;;
    0) _bs="--bsrange=512-600k" _rw=randwrite ;;
    # Sizes beyond MDTS (1 MiB): the kernel splits them.
    1) _bs="--bssplit=512/10:3584/10:7680/10:65024/10:131584/10:261632/10:523776/10:1049088/10:1573376/10:2097152/10" _rw=randwrite ;;
    2) _bs="--bsrange=512-2560k" _rw=write ;;
    *) _bs="--bsrange=1k-1100k" _rw=randrw ;;
  esac
  case " $FIO_BS " in *" $_bs "*) ;; *) FIO_BS="$FIO_BS $_bs" ;; esac
  # shellcheck disable=SC2046 # one job per disk: "--name=D --filename=/dev/D" split in two
  set -- $(for _d in "$@"; do echo "--name=$_d --filename=/dev/$_d"; done)
  echo "+ fio ($_name) $_rw $_bs on $*"
  # shellcheck disable=SC2086 # $_bs: one option, $_extra: options
  timeout 600 fio --ioengine=libaio --direct=1 --iodepth=16 --rw="$_rw" $_bs \
    --offset="${PT_REGION_MB}M" --size="${FIO_MB}M" \
    --verify=crc32c --verify_fatal=1 --randrepeat=0 \
    $_extra --output-format=json --output="$WORK/$_name.json" "$@" > "$WORK/$_name.out" 2>&1 &
  echo $! > "$WORK/$_name.pid"
}

# fio_wait NAME: waits for the job; fails on a non-zero exit or a job error; counts its I/Os.
fio_wait() {
  _pid=$(cat "$WORK/$1.pid")
  _rc=0
  wait "$_pid" || _rc=$?
  # fio writes its notes ("multiple writers may overwrite...") into the JSON file too.
  sed -n '/^{/,$p' "$WORK/$1.json" > "$WORK/$1.j" 2>/dev/null
  if [ "$_rc" -ne 0 ]; then
    cat "$WORK/$1.out"
    jq -c '.jobs[] | {jobname, error, read: .read.total_ios, write: .write.total_ios}' "$WORK/$1.j" 2>/dev/null
    fail "fio $1 exited with $_rc"
  fi
  _err=$(jq '[.jobs[].error] | add' "$WORK/$1.j")
  [ "$_err" = 0 ] || { cat "$WORK/$1.out"; fail "fio $1 reports error $_err"; }
  _ios=$(jq '[.jobs[] | .read.total_ios + .write.total_ios] | add' "$WORK/$1.j")
  _jobs=$(jq '.jobs | length' "$WORK/$1.j")
  FIO_IOS=$((FIO_IOS + _ios))
  FIO_JOBS=$((FIO_JOBS + _jobs))
  echo "  [$(elapsed) s] fio $1: $_jobs job(s), $_ios I/Os verified, no error"
}

# reset CTRL: nvme reset, then the controller must be live again.
reset_ctrl() {
  echo "+ nvme reset /dev/$1"
  nvme reset "/dev/$1" || fail "nvme reset /dev/$1"
  wait_live "$1" 60 || fail "$1 not live again after the reset"
  RESETS=$((RESETS + 1))
}

# holds PID PATH: whether process PID has a descriptor open on PATH (printed).
holds() {
  for _fd in /proc/"$1"/fd/*; do
    [ "$(readlink "$_fd" 2>/dev/null)" = "$2" ] && { echo "$_fd -> $2"; return 0; }
  done
  return 1
}

# released PATH: waits until the target holds no descriptor on PATH.
released() {
  _pid=$(cat "$LOG/target.pid")
  _n=50
  while [ "$_n" -gt 0 ]; do
    holds "$_pid" "$1" > /dev/null || return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  holds "$_pid" "$1"
  return 1
}

modprobe loop 2>/dev/null
config ""
run "check-config" "$T" check-config "$CFG"
start_bg target "$T" --config "$CFG" --ctl-socket "$CTL"
run "target listening" wait_log target "port 1 tcp at $GUEST_IP:4420"
connect "$BASE"
wait_ns "$BASE" 1 present || fail "no base namespace"
BDEV=$(ns_disk "$BASE" 1)
echo "base subsystem connected: $BDEV; budget ${BUDGET} s (SOAK_MINUTES=${SOAK_MINUTES:-unset})"

# Issue 32 as blktests met it: on the fresh target, 1 MiB transfers (32 in flight) take the
# arena in blocks of the largest class (its tail is too small for one); then transfers of
# classes not used yet, 513 blocks first, must still be served (they waited forever when
# freed blocks never merged).
run "pattern" dd if=/dev/urandom of="$WORK/pattern" bs=1M count=3 status=none
fio_start fill fill "$BDEV"
fio_wait fill
k=0
for cnt in 513 511 1 8 129; do
  s=$((1 + 2048 * k))
  head -c $((cnt * 512)) "$WORK/pattern" > "$WORK/fill.dat"
  o=$(nvme write "/dev/$BDEV" --start-block="$s" --block-count=$((cnt - 1)) --data-size=$((cnt * 512)) \
    --data="$WORK/fill.dat" 2>&1) || { echo "$o"; fail "nvme write of $cnt blocks after 1 MiB transfers filled the arena"; }
  rm -f "$WORK/pt.back"
  o=$(nvme read "/dev/$BDEV" --start-block="$s" --block-count=$((cnt - 1)) --data-size=$((cnt * 512)) \
    --data="$WORK/pt.back" 2>&1) || { echo "$o"; fail "nvme read of $cnt blocks after 1 MiB transfers filled the arena"; }
  cmp "$WORK/fill.dat" "$WORK/pt.back" || fail "$cnt blocks read back differ"
  PT=$((PT + 2))
  k=$((k + 1))
done
echo "  [$(elapsed) s] 513, 511, 1, 8, 129 blocks written and read back after 1 MiB transfers filled the arena"
health

while [ "$ROUNDS" -lt "$MIN_ROUNDS" ] || [ "$(elapsed)" -lt "$BUDGET" ]; do
  ROUNDS=$((ROUNDS + 1))
  r=$ROUNDS
  NQN=$PFX$r
  t0=$(date +%s)
  if [ $((r % 2)) -eq 1 ]; then D1="" D2="--hdr-digest --data-digest"; else D1="--hdr-digest --data-digest" D2=""; fi
  echo "== round $r ($NQN) at $(elapsed) s: connect ${D1:-without digests}, reconnect ${D2:-without digests}"
  run "loop backing file" truncate -s "${NS_MB}M" "$WORK/loop-$r.img"
  LOOP=$(losetup -f --show "$WORK/loop-$r.img") || fail "losetup"
  run "file backing" truncate -s "${NS_MB}M" "$WORK/file-$r.img"
  run "pattern" dd if=/dev/urandom of="$WORK/pattern" bs=1M count=3 status=none
  # The base keeps working while subsystems come and go.
  fio_start "base-$r" $((r % 4)) "$BDEV"
  if [ $((r % 2)) -eq 1 ]; then
    config "$NQN" "1:$LOOP" "2:$WORK/file-$r.img"
    expect "ctl reload adds $NQN" "$NQN" "$T" ctl --socket "$CTL" reload
  else
    expect "ctl add-subsystem" "$NQN" "$T" ctl --socket "$CTL" add-subsystem "$NQN" --allow-any-host
    expect "ctl add-ns (loop)" "$NQN" "$T" ctl --socket "$CTL" add-ns "$NQN" "$LOOP" --nsid 1
    expect "ctl add-ns (file)" "$NQN" "$T" ctl --socket "$CTL" add-ns "$NQN" "$WORK/file-$r.img" --nsid 2
    expect "ctl add-ns (RAM)" "$NQN" "$T" ctl --socket "$CTL" add-ns "$NQN" "$RAM_NS" --nsid 3
    expect "ctl link-subsystem" "port 1" "$T" ctl --socket "$CTL" link-subsystem 1 "$NQN"
  fi
  # shellcheck disable=SC2086 # $D1: digest options
  connect "$NQN" $D1
  if [ $((r % 2)) -eq 1 ]; then
    expect "ctl add-ns $RAM_NS" "$NQN" "$T" ctl --socket "$CTL" add-ns "$NQN" "$RAM_NS" --nsid 3
  fi
  # Live changes are saved in the configuration file.
  check "$CFG holds $NQN's RAM namespace" "grep -qF '$RAM_NS' '$CFG'"
  for n in 1 2 3; do wait_ns "$NQN" "$n" present || fail "namespace $n of $NQN"; done
  CTRL=$(ctrl_of "$NQN") || fail "no controller for $NQN"
  D_1=$(ns_disk "$NQN" 1) D_2=$(ns_disk "$NQN" 2) D_3=$(ns_disk "$NQN" 3)
  echo "  $CTRL: mdts $(nvme id-ctrl "/dev/$CTRL" | awk '/^mdts/ {print $3}'), ns 1 $D_1 ($LOOP), 2 $D_2 (file), 3 $D_3 ($RAM_NS)"

  fio_start "fio-$r-a" "$r" "$D_1" "$D_2" "$D_3"
  if [ $((r % 3)) -eq 1 ]; then
    sleep 2
    reset_ctrl "$CTRL"
  fi
  pt_write_all 1 "$D_1" "$WORK/loop-$r.img"
  pt_write_all 2 "$D_2" "$WORK/file-$r.img"
  pt_write_all 3 "$D_3" ""
  fio_wait "fio-$r-a"
  if [ $((r % 3)) -eq 2 ]; then
    reset_ctrl "$CTRL"
    # One namespace read back after the reset (all of them are after the reconnect).
    n=$((r / 3 % 3 + 1))
    pt_read_all "$n" "$(ns_disk "$NQN" "$n")"
  fi
  health

  run "disconnect" nvme disconnect -n "$NQN"
  # shellcheck disable=SC2086 # $D2: digest options
  connect "$NQN" $D2
  RECONNECTS=$((RECONNECTS + 1))
  for n in 1 2 3; do wait_ns "$NQN" "$n" present || fail "namespace $n of $NQN after the reconnect"; done
  D_1=$(ns_disk "$NQN" 1) D_2=$(ns_disk "$NQN" 2) D_3=$(ns_disk "$NQN" 3)
  fio_start "fio-$r-b" $((r + 1)) "$D_1" "$D_2" "$D_3"
  for n in 1 2 3; do pt_read_all "$n" "$(ns_disk "$NQN" "$n")"; done
  fio_wait "fio-$r-b"
  fio_wait "base-$r"
  health

  if [ $((r % 2)) -eq 1 ]; then
    expect "ctl remove-ns 3" "$NQN" "$T" ctl --socket "$CTL" remove-ns "$NQN" 3
    wait_ns "$NQN" 3 absent || fail "namespace 3 still there after remove-ns"
    run "disconnect" nvme disconnect -n "$NQN"
    config ""
    expect "ctl reload removes $NQN" "$NQN" "$T" ctl --socket "$CTL" reload
  else
    run "disconnect" nvme disconnect -n "$NQN"
    expect "ctl remove-subsystem" "$NQN" "$T" ctl --socket "$CTL" remove-subsystem "$NQN"
  fi
  if "$T" ctl --socket "$CTL" status | grep -qF "$NQN"; then fail "$NQN still in ctl status"; fi
  if grep -qF "$NQN" "$CFG"; then fail "$NQN still in $CFG"; fi
  released "$LOOP" || fail "the target still holds $LOOP after removing $NQN"
  released "$WORK/file-$r.img" || fail "the target still holds file-$r.img after removing $NQN"
  run "losetup -d" losetup -d "$LOOP"
  rm -f "$WORK/loop-$r.img" "$WORK/file-$r.img" "$WORK"/pt-*.dat "$WORK"/*.json "$WORK"/*.j "$WORK"/*.out "$WORK"/*.pid
  health
  pid=$(cat "$LOG/target.pid")
  echo "  round $r done in $(( $(date +%s) - t0 )) s; target: $(find "/proc/$pid/fd" -mindepth 1 | wc -l) fds, $(awk '/^VmRSS/ {print $2 $3}' "/proc/$pid/status") RSS, $(awk '/^Threads/ {print $2}' "/proc/$pid/status") threads; longest_command_ms $(status_field longest_command_ms max)"
done

run "disconnect base" nvme disconnect -n "$BASE"
health
"$T" ctl --socket "$CTL" status | grep '^transport' || true
LONGEST=$(status_field longest_command_ms max)
STUCK=$(status_field stuck_commands sum)
SECS=$(elapsed)
stop_bg target
if grep -n 'stuck command' "$LOG/target.log"; then fail "the target logged a stuck command"; fi
if grep -nE 'ERROR|panicked' "$LOG/target.log"; then fail "the target logged an error or a panic"; fi
echo "target warnings (not failures):"
grep -n 'WARN' "$LOG/target.log" | head -n 20 || true
echo "soak summary: rounds $ROUNDS, passthru commands $PT, fio I/Os $FIO_IOS in $FIO_JOBS jobs," \
  "resets $RESETS, reconnects $RECONNECTS, passthru block counts (512 B):$PT_SIZES," \
  "fio sizes:$FIO_BS, elapsed ${SECS} s, longest_command_ms $LONGEST, stuck_commands $STUCK"
