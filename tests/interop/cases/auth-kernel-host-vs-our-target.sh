# DH-HMAC-CHAP (issue 12): the Linux kernel host authenticates to nvmf-target (in the guest,
# NVMe/TCP on the guest's address). Keys come from `nvme gen-dhchap-key`. Each combination
# of hash (sha256/384/512) x DH group (null, ffdhe2048, ffdhe8192) x direction (host only,
# bidirectional) is its own host NQN whose allowed hash and group are that one, so the
# target must pick it; the kernel connects, reads, disconnects. A verifying fio job runs for
# one uni- and one bidirectional host; a re-authentication (new key in the target's key
# file + SIGHUP, then the new secret written to sysfs) happens while fio runs; a wrong key,
# no key and a wrong controller key are refused: no disk appears and the target logs why.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:auth
T="$BIN/nvmf-target"
CFG="$WORK/auth.yaml"
CTL="$WORK/ctl.sock"
KEYS="$WORK/keys"
mkdir -p "$KEYS" && chmod 700 "$KEYS"

hostnqn() { echo "nqn.2014-08.org.nvmexpress:uuid:0000000$1-$2-4000-8000-00000000000$3"; }
hostid() { echo "0000000$1-$2-4000-8000-00000000000$3"; }

# The matrix: H (1..3 = sha256/384/512) G (0 null, 1 ffdhe2048, 5 ffdhe8192) B (0/1).
HASHES="1:hmac(sha256) 2:hmac(sha384) 3:hmac(sha512)"
DHGROUPS="0:null 1:ffdhe2048 5:ffdhe8192"
{
  echo "ports:"
  echo "  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: \"4420\", subsystems: [$NQN] }"
  echo "subsystems:"
  echo "  - nqn: $NQN"
  echo "    allowed_hosts:"
} > "$CFG.head"
: > "$CFG.hosts"
for hh in $HASHES; do
  h=${hh%%:*}
  for gg in $DHGROUPS; do
    g=${gg%%:*}
    for b in 0 1; do
      n=$(hostnqn "$h" "000$g" "$b")
      nvme gen-dhchap-key --hmac="$h" --nqn="$n" > "$KEYS/$h$g$b.key" || exit 1
      chmod 600 "$KEYS/$h$g$b.key"
      echo "      - \"$n\"" >> "$CFG.head"
      {
        echo "  - nqn: \"$n\""
        echo "    dhchap_key_file: $KEYS/$h$g$b.key"
        echo "    dhchap_hash: ${hh#*:}"
        echo "    dhchap_dhgroup: ${gg#*:}"
        if [ "$b" = 1 ]; then
          nvme gen-dhchap-key --hmac=3 --key-length=64 > "$KEYS/$h$g$b.ctrl" || exit 1
          chmod 600 "$KEYS/$h$g$b.ctrl"
          echo "    dhchap_ctrl_key_file: $KEYS/$h$g$b.ctrl"
        fi
      } >> "$CFG.hosts"
    done
  done
done
run "backing file (64 MiB)" truncate -s 64M "$WORK/ns1.img"
{
  cat "$CFG.head"
  echo "    namespaces:"
  echo "      - { nsid: 1, device_path: $WORK/ns1.img }"
  echo "hosts:"
  cat "$CFG.hosts"
} > "$CFG"
run "check-config reads every key" "$T" check-config "$CFG"
start_bg target "$T" --config "$CFG" --ctl-socket "$CTL"
wait_port "$GUEST_IP" 4420

# connect_as H G B [extra nvme connect args]: connects that host with its secrets.
connect_as() {
  _k=$KEYS/$1$2$3
  set -- "$1" "$2" "$3" "$(hostnqn "$1" "000$2" "$3")" "$(hostid "$1" "000$2" "$3")"
  _c=""
  [ "$3" = 1 ] && _c="--dhchap-ctrl-secret=$(cat "$_k.ctrl")"
  nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --hostnqn="$4" --hostid="$5" \
    --dhchap-secret="$(cat "$_k.key")" $_c
}

for hh in $HASHES; do
  h=${hh%%:*}
  for gg in $DHGROUPS; do
    g=${gg%%:*}
    for b in 0 1; do
      dmesg -C
      run "connect ${hh#*:} ${gg#*:} bidirectional=$b" connect_as "$h" "$g" "$b"
      DEV=$(wait_nvme "$NQN") || { echo "FAIL: no disk after authenticating (${hh#*:} ${gg#*:} $b)"; exit 1; }
      # The kernel names what it authenticated with: the target chose what it was told.
      run "kernel: authenticated with ${hh#*:} ${gg#*:}" sh -c "dmesg | grep -qF 'authenticated with hash ${hh#*:} dhgroup ${gg#*:}'"
      if [ "$b" = 1 ]; then
        run "kernel: controller authenticated" sh -c "dmesg | grep -qF 'controller authenticated'"
      fi
      run "read 1 MiB" dd if="/dev/$DEV" of=/dev/null bs=1M count=1 iflag=direct status=none
      if [ "$h$g" = 11 ]; then
        run "verifying fio (${gg#*:}, bidirectional=$b)" fio --name=v --filename="/dev/$DEV" \
          --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=8 --size=8M \
          --verify=crc32c --verify_fatal=1 --output-format=terse
      fi
      expect "disconnect" "disconnected 1 controller" nvme disconnect -n "$NQN"
    done
  done
done

# Re-authentication while fio runs: new key on the target (file + SIGHUP), then in sysfs.
run "connect for re-authentication" connect_as 2 1 1
DEV=$(wait_nvme "$NQN") || { echo "FAIL: no disk"; exit 1; }
CTRL=$(for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn)" = "$NQN" ] && basename $c; done | head -1)
BEFORE=$(grep -c "host authenticated" "$LOG/target.log")
start_bg fio fio --name=reauth --filename="/dev/$DEV" --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=4k --iodepth=8 --size=32M --verify=crc32c --verify_fatal=1 --output-format=terse
sleep 2
NEWKEY=$(nvme gen-dhchap-key --hmac=2 --nqn="$(hostnqn 2 0001 1)")
run "new key in the target's key file" sh -c "echo '$NEWKEY' > '$KEYS/211.key'"
run "SIGHUP" kill -HUP "$(cat "$LOG/target.pid")"
run "the target applied it" wait_log target "DH-HMAC-CHAP policy changed"
run "new secret in sysfs (re-authentication)" sh -c "echo '$NEWKEY' > /sys/class/nvme/$CTRL/dhchap_secret"
FIO_PID=$(cat "$LOG/fio.pid")
wait "$FIO_PID"
FIO_RC=$?
rm -f "$LOG/fio.pid"
check "fio during re-authentication finished clean" "[ $FIO_RC -eq 0 ]"
AFTER=$(grep -c "host authenticated" "$LOG/target.log")
check "the queues re-authenticated with the new key ($BEFORE -> $AFTER)" "[ $AFTER -gt $BEFORE ]"
expect "disconnect" "disconnected 1 controller" nvme disconnect -n "$NQN"

# Refusals: no disk appears, and the target says why.
WRONG=$(nvme gen-dhchap-key --hmac=1)
refused() {
  if "$@" 2>&1; then echo "FAIL: connected"; nvme disconnect -n "$NQN"; return 1; fi
  sleep 1
  for b in /sys/block/nvme*; do
    [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && { echo "FAIL: a disk appeared"; return 1; }
  done
  return 0
}
N1=$(hostnqn 1 0001 0); I1=$(hostid 1 0001 0)
run "wrong key refused" refused nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --hostnqn="$N1" --hostid="$I1" --dhchap-secret="$WRONG"
run "the target logs the mismatch" wait_log target "host response does not match its key"
run "no key refused" refused nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --hostnqn="$N1" --hostid="$I1"
run "the target logs the unauthenticated queue" wait_log target "closed before DH-HMAC-CHAP authentication completed"
N2=$(hostnqn 1 0001 1); I2=$(hostid 1 0001 1)
run "wrong controller key refused" refused nvme connect -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" --hostnqn="$N2" --hostid="$I2" --dhchap-secret="$(cat "$KEYS/111.key")" --dhchap-ctrl-secret="$WRONG"
run "the target logs the host's Failure2" wait_log target "host abandoned DH-HMAC-CHAP"
stop_bg target
check "no panic in the target log" "! grep -q panicked '$LOG/target.log'"
echo "DH-HMAC-CHAP with the kernel host: all checks passed"
