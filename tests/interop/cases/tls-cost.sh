# What TLS costs (issue 13), measured where kernel TLS exists: nvmf-target and nvmf-initiator
# perf both in the guest (6.12, `tls` module), NVMe/TCP on the guest's address with a null
# namespace, 3 s a run: plain, TLS with records in user space (OpenSSL; target tcp.ktls: false,
# host --no-ktls), TLS with records in kernel TLS on both ends. 4 KiB random read at QD 1 and
# 32, 128 KiB sequential read and write at QD 16. Under qemu TCG only the ratios between the
# rows mean anything; the case fails only if a run fails or reports errors.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:tls-cost
HOST=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000e1
KEY='NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:'
T="$BIN/nvmf-target"
I="$BIN/nvmf-initiator"
SECS=3
run "kernel TLS module" modprobe tls
# The kernel's AES-GCM: the AES-NI and carry-less multiply drivers where the (emulated) CPU
# has them, as a real machine would load them; otherwise the generic C code.
modprobe -q aesni_intel 2>/dev/null || true
modprobe -q ghash_clmulni_intel 2>/dev/null || true
echo "+ kernel gcm(aes): $(awk '/^name/ {n=$3} /^driver/ && n=="gcm(aes)" {print $3; exit}' /proc/crypto)"
target() { # NAME TSAS KTLS
  cat > "$WORK/$1.yaml" <<YAML
tcp:
  ktls: $3
ports:
  - { portid: 1, trtype: tcp, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$NQN] $2 }
subsystems:
  - { nqn: $NQN, allow_any_host: true, namespaces: [ { nsid: 1, device_path: "null:8G" } ] }
hosts:
  - { nqn: "$HOST", tls_key: "$KEY" }
YAML
  start_bg "target-$1" "$T" --config "$WORK/$1.yaml" --ctl-socket "$WORK/ctl-$1.sock"
  wait_port "$GUEST_IP" 4420
}
ROWS=""
measure() { # LABEL RW BS QD [HOST FLAGS...]
  _label=$1; _rw=$2; _bs=$3; _qd=$4
  shift 4
  echo "+ perf $_label $_rw $_bs QD$_qd $*"
  if ! "$I" perf -t tcp -a "$GUEST_IP" -s 4420 -n "$NQN" -q "$HOST" --rw "$_rw" --bs "$_bs" \
    --iodepth "$_qd" --runtime "$SECS" "$@" > "$WORK/perf.out" 2>&1; then
    cat "$WORK/perf.out"; echo "FAIL: perf $_label"; exit 1
  fi
  grep -q "errors=0" "$WORK/perf.out" || { cat "$WORK/perf.out"; echo "FAIL: perf $_label reported errors"; exit 1; }
  _iops=$(sed -n 's/.*IOPS=\([0-9.kM]*\).*/\1/p' "$WORK/perf.out" | head -1)
  _bw=$(sed -n 's/.*BW=\([0-9.]*[KMG]iB\/s\).*/\1/p' "$WORK/perf.out" | head -1)
  ROWS="$ROWS| $_label | $_rw $_bs QD$_qd | $_iops | $_bw |
"
}
rows() { # LABEL [HOST FLAGS...]
  _l=$1
  shift
  measure "$_l" randread 4k 1 "$@"
  measure "$_l" randread 4k 32 "$@"
  measure "$_l" read 128k 16 "$@"
  measure "$_l" write 128k 16 "$@"
}
target plain "" true
rows plain
stop_bg target-plain
target user ", tsas: tls1.3" false
rows "TLS, user space" --tls-key "$KEY" --no-ktls
stop_bg target-user
target kernel ", tsas: tls1.3" true
rows "TLS, kernel TLS" --tls-key "$KEY"
stop_bg target-kernel
check "the last target's records went to kernel TLS" "grep 'TLS 1.3 established' $LOG/target-kernel.log | grep -q 'kernel TLS'"
echo "TLS cost in the lab (qemu TCG, 2 vCPUs; compare rows, not absolute figures):"
echo "| records | workload | IOPS | bandwidth |"
echo "|---|---|---:|---:|"
printf '%s' "$ROWS"
