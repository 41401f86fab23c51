# TLS 1.3 (issue 13): the Linux kernel host (nvme-tcp, with trixie's nvme-cli 2.13 and tlshd)
# against nvmf-target in the guest on a port with `tsas: tls1.3` (TLS required), the host's
# configured PSK from `nvme gen-tls-key` in the target's config (tls_key_file). `nvme discover
# --tls` shows the port's sectype; `nvme connect --tls --tls-key` and `nvme connect --tls` with
# the TLS PSK inserted into the .nvme keyring both give a disk; a verifying fio job, mkfs.ext4,
# mount, files written and read back after a reconnect; a plain connect is refused (the target
# logs why) and the target logs each TLS session it established. The target's records go to
# kernel TLS, then (tcp.ktls: false) stay in user space; our host connects to it too, with
# kernel TLS and with --no-ktls.
. "$INTEROP/lib.sh"
NQN=nqn.2024-01.io.nvmf-rs:tls
DISC=nqn.2014-08.org.nvmexpress.discovery
HOST=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000d1
HOSTID=00000000-0000-4000-8000-0000000000d1
T="$BIN/nvmf-target"
tls_peers
KEY=$($NVME_TLS gen-tls-key --hmac=1 --identity=0 --hostnqn="$HOST" --subsysnqn="$NQN")
case "$KEY" in NVMeTLSkey-1:01:*) ;; *) echo "FAIL: gen-tls-key printed no key"; exit 1 ;; esac
echo "$KEY" > "$WORK/host.psk" && chmod 600 "$WORK/host.psk"
run "backing file" truncate -s 256M "$WORK/disk.img"
cat > "$WORK/tls.yaml" <<YAML
ports:
  - { portid: 1, trtype: tcp, traddr: $GUEST_IP, trsvcid: "4420", tsas: tls1.3, subsystems: [$NQN] }
subsystems:
  - nqn: $NQN
    allowed_hosts: [$HOST]
    namespaces:
      - { nsid: 1, device_path: $WORK/disk.img }
hosts:
  - nqn: $HOST
    tls_key_file: $WORK/host.psk
YAML
run "config is valid" "$T" check-config "$WORK/tls.yaml"
start_bg target "$T" --config "$WORK/tls.yaml" --ctl-socket "$WORK/ctl.sock"
wait_port "$GUEST_IP" 4420
N="$NVME_TLS"
F="-t tcp -a $GUEST_IP -s 4420 -q $HOST -I $HOSTID"
# nvme-cli hands --tls-key to I/O controllers only; a discovery controller's PSK comes
# from the keyring.
run "discovery TLS PSK into the .nvme keyring" $N check-tls-key --insert --identity=0 \
  --hostnqn="$HOST" --subsysnqn="$DISC" --keydata="$KEY"
expect "nvme discover --tls: sectype tls1.3, TLS required" "sectype: *tls1?3" \
  $N discover $F --tls
expect "discovery log: treq required" "treq: *required" $N discover $F --tls
echo "+ nvme connect (plain, must fail)"
if $N connect $F -n "$NQN" > "$WORK/plain.out" 2>&1; then
  cat "$WORK/plain.out"; echo "FAIL: a plain connect to a TLS-required port succeeded"; exit 1
fi
cat "$WORK/plain.out"
run "nvme connect --tls --tls-key" $N connect $F -n "$NQN" --tls --tls-key="$KEY"
dev=$(wait_nvme "$NQN") || { echo "FAIL: no namespace over TLS"; exit 1; }
echo "+ namespace over TLS: /dev/$dev"
run "fio verify 4k randrw QD32 over TLS" fio --name=v4k --filename="/dev/$dev" --rw=randrw --bs=4k \
  --iodepth=32 --size=16M --verify=crc32c --ioengine=libaio --direct=1 --output="$WORK/fio4k"
run "fio verify 128k randrw QD16 over TLS" fio --name=v128k --filename="/dev/$dev" --rw=randrw \
  --bs=128k --iodepth=16 --offset=32M --size=32M --verify=crc32c --ioengine=libaio --direct=1 \
  --output="$WORK/fio128k"
grep -hE 'err=|IOPS=' "$WORK/fio4k" "$WORK/fio128k"
mkdir -p "$WORK/mnt"
run "mkfs.ext4 over TLS" mkfs.ext4 -q -F "/dev/$dev"
run "mount" mount "/dev/$dev" "$WORK/mnt"
run "files" sh -c "dd if=/dev/urandom of=$WORK/mnt/a bs=1M count=8 status=none && cp $WORK/mnt/a $WORK/a && sync"
run "umount" umount "$WORK/mnt"
run "disconnect" nvme disconnect -n "$NQN"
run "TLS PSK into the .nvme keyring" $N check-tls-key --insert --identity=0 --hostnqn="$HOST" \
  --subsysnqn="$NQN" --keydata="$KEY"
run "nvme connect --tls (key from the keyring)" $N connect $F -n "$NQN" --tls
dev=$(wait_nvme "$NQN") || { echo "FAIL: no namespace after the keyring connect"; exit 1; }
run "mount again" mount "/dev/$dev" "$WORK/mnt"
run "the file survived" cmp "$WORK/mnt/a" "$WORK/a"
run "umount" umount "$WORK/mnt"
run "disconnect" nvme disconnect -n "$NQN"
I="$BIN/nvmf-initiator"
C="-t tcp -a $GUEST_IP -s 4420 -n $NQN -q $HOST -I $HOSTID --tls-key $KEY"
expect "our host against it too, its records in user space (--no-ktls)" "errors=0" \
  $I perf $C --no-ktls --rw randwrite --bs 16k --iodepth 8 --runtime 3 --size 8M --verify
expect "our host, kernel TLS" "errors=0" $I perf $C --rw randread --bs 4k --iodepth 8 --runtime 3 --size 8M
stop_bg target
check "the target logged established TLS sessions" "grep -q 'TLS 1.3 established' $LOG/target.log"
check "the target's records went to kernel TLS" "grep 'TLS 1.3 established' $LOG/target.log | grep -q 'kernel TLS'"
cp "$LOG/target.log" "$LOG/target-ktls.log"
# The same with the target's records in user space (tcp.ktls: false).
printf 'tcp:\n  ktls: false\n' >> "$WORK/tls.yaml"
start_bg target "$T" --config "$WORK/tls.yaml" --ctl-socket "$WORK/ctl.sock"
wait_port "$GUEST_IP" 4420
run "nvme connect --tls (target: user-space records)" $N connect $F -n "$NQN" --tls
dev=$(wait_nvme "$NQN") || { echo "FAIL: no namespace with user-space records"; exit 1; }
run "fio verify 64k randrw QD8, user-space records" fio --name=v64k --filename="/dev/$dev" --rw=randrw \
  --bs=64k --iodepth=8 --size=16M --verify=crc32c --ioengine=libaio --direct=1 --output="$WORK/fio64k"
grep -hE 'err=' "$WORK/fio64k"
run "disconnect" nvme disconnect -n "$NQN"
stop_bg target
check "the target kept its records in user space" "grep 'TLS 1.3 established' $LOG/target.log | grep -q 'user space (tcp.ktls off)'"
cat "$LOG/target.log" >> "$LOG/target-ktls.log" && mv "$LOG/target-ktls.log" "$LOG/target.log"
check "the target logged the refused plain connection" "grep -q 'requires TLS' $LOG/target.log"
# Nothing else may be wrong: the refused plain connect is the only warning.
if grep -nE 'ERROR|WARN|panicked' "$LOG/target.log" | grep -v 'requires TLS'; then
  echo "FAIL: the target logged the lines above"; exit 1
fi
echo "the kernel host vs our target over TLS 1.3: all checks passed"
