# Helpers for interop cases (POSIX sh, sourced by each case in the guest; see README.md).
# Env: INTEROP, BIN, GUEST_IP, HOST_IP, WORK (scratch, tmpfs), LOG (kept in the run's output).

NVMET=/sys/kernel/config/nvmet

# run DESC CMD...: prints the command, runs it, and ends the case if it fails.
run() {
  _desc=$1
  shift
  echo "+ $*"
  if ! "$@"; then
    echo "FAIL: $_desc"
    exit 1
  fi
}

# expect DESC REGEX CMD...: like run, and the output (printed) must match the extended REGEX.
expect() {
  _desc=$1
  _re=$2
  shift 2
  echo "+ $*"
  _out=${WORK:-/tmp}/.expect.out
  if ! "$@" > "$_out" 2>&1; then
    cat "$_out"
    echo "FAIL: $_desc"
    exit 1
  fi
  cat "$_out"
  if ! grep -qE -- "$_re" "$_out"; then
    echo "FAIL: $_desc: the output does not match /$_re/"
    exit 1
  fi
}

# expect_fail DESC REGEX CMD...: CMD must fail, and its output (printed) match the extended REGEX.
expect_fail() {
  _desc=$1
  _re=$2
  shift 2
  echo "+ $* (must fail)"
  if _out=$("$@" 2>&1); then echo "$_out"; echo "FAIL: $_desc: it succeeded"; exit 1; fi
  echo "$_out"
  echo "$_out" | grep -qE -- "$_re" || { echo "FAIL: $_desc: no '$_re' in the error"; exit 1; }
}

# check DESC SHELL-CONDITION: like run, for a condition written as shell code.
check() {
  _desc=$1
  shift
  echo "+ [ $* ]"
  if ! sh -c "$*"; then
    echo "FAIL: $_desc"
    exit 1
  fi
}

# wait_block DEV [SECS]: waits until /sys/block/DEV reports a non-zero size.
wait_block() {
  _n=$(( ${2:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    _size=$(cat "/sys/block/$1/size" 2>/dev/null || echo 0)
    [ "$_size" -gt 0 ] && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "FAIL: /sys/block/$1 never appeared"
  exit 1
}

# nvme_dev NQN: prints the block device (nvmeXnY) of the first namespace of the connected NQN.
# A namespace disk's "device" is its controller, or its subsystem under native multipath;
# both carry subsysnqn. Native multipath also lists each path as a hidden nvmeXcYnZ.
nvme_dev() {
  for _b in /sys/block/nvme*; do
    case ${_b##*/} in nvme*c*n*) continue ;; esac # a multipath path's hidden disk
    [ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$1" ] && { basename "$_b"; return 0; }
  done
  return 1
}

# nvme_ns_dev NQN NSID: prints the block device (nvmeXnY) of namespace NSID of the connected NQN
# (several namespaces: the disk's name counts namespaces in the order the host found them, so
# the NSID is read from sysfs).
nvme_ns_dev() {
  for _b in /sys/block/nvme*; do
    case ${_b##*/} in nvme*c*n*) continue ;; esac
    [ "$(cat "$_b/device/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    [ "$(cat "$_b/nsid" 2>/dev/null)" = "$2" ] && { basename "$_b"; return 0; }
  done
  return 1
}

# wait_nvme_ns NQN NSID [SECS]: waits for namespace NSID's disk to appear with a size; prints it.
wait_nvme_ns() {
  _n=$(( ${3:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    _d=$(nvme_ns_dev "$1" "$2") && [ "$(cat "/sys/block/$_d/size" 2>/dev/null || echo 0)" -gt 0 ] && {
      echo "$_d"
      return 0
    }
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "namespace $2 of $1 did not appear" >&2
  return 1
}

# wait_nvme NQN [SECS]: waits for the namespace disk of NQN to appear with a size; prints its name.
wait_nvme() {
  _n=$(( ${2:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    _d=$(nvme_dev "$1") && [ "$(cat "/sys/block/$_d/size" 2>/dev/null || echo 0)" -gt 0 ] && {
      echo "$_d"
      return 0
    }
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "no namespace of $1 appeared" >&2
  return 1
}

# kernel_target_add TRTYPE ADDR PORT NQN FILE: exports FILE as namespace 1 of NQN through the
# kernel target (nvmet, configfs) on a new port.
kernel_target_add() {
  _s=$NVMET/subsystems/$4
  mkdir "$_s" && echo 1 > "$_s/attr_allow_any_host" &&
    mkdir "$_s/namespaces/1" && echo "$5" > "$_s/namespaces/1/device_path" &&
    echo 1 > "$_s/namespaces/1/buffered_io" && echo 1 > "$_s/namespaces/1/enable" || return 1
  _p=1
  while [ -e "$NVMET/ports/$_p" ]; do _p=$((_p + 1)); done
  mkdir "$NVMET/ports/$_p" && echo "$1" > "$NVMET/ports/$_p/addr_trtype" &&
    echo ipv4 > "$NVMET/ports/$_p/addr_adrfam" && echo "$2" > "$NVMET/ports/$_p/addr_traddr" &&
    echo "$3" > "$NVMET/ports/$_p/addr_trsvcid" && ln -s "$_s" "$NVMET/ports/$_p/subsystems/$4"
}

# kernel_target_clear: removes every port, subsystem and namespace of the kernel target.
kernel_target_clear() {
  [ -d "$NVMET" ] || return 0
  for _l in "$NVMET"/ports/*/subsystems/*; do [ -L "$_l" ] && rm "$_l"; done
  for _p in "$NVMET"/ports/*; do [ -d "$_p" ] && rmdir "$_p"; done
  for _n in "$NVMET"/subsystems/*/namespaces/*; do
    [ -d "$_n" ] && { echo 0 > "$_n/enable"; rmdir "$_n"; }
  done
  for _l in "$NVMET"/subsystems/*/allowed_hosts/*; do [ -L "$_l" ] && rm "$_l"; done
  for _s in "$NVMET"/subsystems/*; do [ -d "$_s" ] && rmdir "$_s"; done
  for _h in "$NVMET"/hosts/*; do [ -d "$_h" ] && rmdir "$_h"; done
  return 0
}

# start_bg NAME CMD...: starts CMD in the background, output in $LOG/NAME.log.
start_bg() {
  _name=$1
  shift
  echo "+ $* &  (log: $_name.log)"
  "$@" > "$LOG/$_name.log" 2>&1 &
  echo $! > "$LOG/$_name.pid"
}

# stop_bg NAME: SIGTERM, then waits up to 20 s; fails the case if it needed SIGKILL.
stop_bg() {
  _pid=$(cat "$LOG/$1.pid" 2>/dev/null) || return 0
  kill -TERM "$_pid" 2>/dev/null
  _n=100
  while kill -0 "$_pid" 2>/dev/null && [ "$_n" -gt 0 ]; do sleep 0.2; _n=$((_n - 1)); done
  rm -f "$LOG/$1.pid"
  if kill -0 "$_pid" 2>/dev/null; then
    kill -KILL "$_pid"
    echo "FAIL: $1 did not stop on SIGTERM"
    exit 1
  fi
}

# log_clean NAME: fails the case when $LOG/NAME.log reports an error, a warning or a panic.
log_clean() {
  if grep -nE 'ERROR|WARN|panicked' "$LOG/$1.log"; then
    echo "FAIL: $1 logged the lines above"
    exit 1
  fi
  echo "+ $1.log: no error, warning or panic"
}

# wait_port ADDR PORT [SECS]: waits until a TCP listener answers on ADDR:PORT.
wait_port() {
  _n=$(( ${3:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "FAIL: nothing listens on $1:$2"
  exit 1
}

# wait_log NAME REGEX [SECS]: waits until $LOG/NAME.log has a line matching the extended REGEX
# (an RDMA listener cannot be probed the way wait_port probes a TCP one).
wait_log() {
  _n=$(( ${3:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    grep -qE -- "$2" "$LOG/$1.log" 2>/dev/null && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  cat "$LOG/$1.log" 2>/dev/null
  return 1
}

# tls_peers: checks that trixie's tools (vm/trixie-tools.sh, unpacked by `run` into $TRIXIE) are
# there and starts tlshd (the kernel's TLS handshake agent) with the `.nvme` keyring linked in,
# logging to $LOG/tlshd.log. Sets NVME_TLS to trixie's nvme-cli 2.13 (bookworm's 2.3 has no TLS).
tls_peers() {
  [ -x "$TRIXIE/run" ] || { echo "FAIL: trixie's tlshd and nvme-cli are not in $TRIXIE"; exit 1; }
  NVME_TLS="$TRIXIE/run nvme"
  modprobe tls || { echo "FAIL: no kernel TLS module"; exit 1; }
  # tlshd looks up its peer's name; the guest has no DNS server, and a resolver that waits
  # for one outlasts the kernel's 10 s handshake timeout. The root is a tmpfs overlay.
  grep -q "$GUEST_IP" /etc/hosts || echo "$GUEST_IP interop-guest" >> /etc/hosts
  grep -q "$HOST_IP" /etc/hosts || echo "$HOST_IP interop-host" >> /etc/hosts
  rm -f /etc/resolv.conf && printf 'options timeout:1 attempts:1\nnameserver 127.0.0.1\n' > /etc/resolv.conf
  printf '[debug]\nloglevel=1\ntls=0\nnl=0\n[authenticate]\nkeyrings=.nvme\n[authenticate.client]\n[authenticate.server]\n' \
    > "$WORK/tlshd.conf"
  start_bg tlshd "$TRIXIE/run" tlshd -s -c "$WORK/tlshd.conf"
  sleep 1
  kill -0 "$(cat "$LOG/tlshd.pid")" 2>/dev/null || { cat "$LOG/tlshd.log"; echo "FAIL: tlshd did not start"; exit 1; }
}

# path_of TRSVCID [NSID]: the hidden path disk (nvmeXcYnZ) of the controller of subsystem $NQN
# (the case's) connected to TRSVCID, under native multipath: its first namespace's, or that of
# namespace NSID (read from sysfs).
path_of() {
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    grep -q "trsvcid=$1" "$_c/address" 2>/dev/null || continue
    if [ -z "${2:-}" ]; then
      for _p in "$_c"/nvme*c*n1; do [ -e "$_p" ] && { basename "$_p"; return 0; }; done
    else
      for _p in "$_c"/nvme*c*n*; do
        [ "$(cat "$_p/nsid" 2>/dev/null)" = "$2" ] && { basename "$_p"; return 0; }
      done
    fi
  done
  return 1
}

# wait_ana TRSVCID STATE [SECS] [NSID]: waits until that path's ana_state (of namespace NSID,
# see path_of) is STATE.
wait_ana() {
  _n=$(( ${3:-30} * 5 ))
  while [ "$_n" -gt 0 ]; do
    _p=$(path_of "$1" "${4:-}") && [ "$(cat "/sys/block/$_p/ana_state" 2>/dev/null)" = "$2" ] && return 0
    sleep 0.2
    _n=$((_n - 1))
  done
  echo "path to $1 is '$(cat "/sys/block/$(path_of "$1" "${4:-}")/ana_state" 2>/dev/null)', not $2" >&2
  return 1
}

# mapd_wait_links DIR N: until exactly N mapd stable names (nvmf-*) exist in DIR (30 s at most;
# the listing and $LOG/mapd.log are shown on failure).
mapd_wait_links() {
  _n=150
  while [ "$(ls "$1" 2>/dev/null | grep -c '^nvmf-')" -ne "$2" ]; do
    _n=$((_n - 1))
    [ "$_n" -gt 0 ] || { ls -l "$1"; cat "$LOG/mapd.log"; echo "FAIL: never $2 stable name(s) in $1"; exit 1; }
    sleep 0.2
  done
  ls -l "$1"
}

# mapd_dev SOCKET SUBNQN NSID: the ublk device (ublkbN) a running mapd names for that namespace.
mapd_dev() {
  "$BIN/nvmf-initiator" mapd-status --status-socket "$1" -o json |
    python3 -c "import json,sys; s=json.load(sys.stdin); print(s['subsystems']['$2']['namespaces']['$3']['detail'].split('/')[-1])"
}

# fio_verified NAME: waits (3 minutes at most) for the fio started as `start_bg NAME`, shows its
# log, and fails unless it exited 0 with no error counted.
fio_verified() {
  _pid=$(cat "$LOG/$1.pid")
  _n=900
  while kill -0 "$_pid" 2>/dev/null && [ "$_n" -gt 0 ]; do sleep 0.2; _n=$((_n - 1)); done
  check "$1 finished" "! kill -0 $_pid 2>/dev/null"
  wait "$_pid"
  _rc=$?
  rm -f "$LOG/$1.pid"
  cat "$LOG/$1.log"
  check "$1 verified without an error" "[ $_rc -eq 0 ] && ! grep -q 'err=[ ]*[1-9]' '$LOG/$1.log'"
}
