# nvmf-initiator mapd --ublk against the Linux kernel's NVMe/TCP target (nvmet, configfs): the
# subsystem discovery lists is mapped namespace by namespace as /dev/ublkbN with a stable link
# (nvmf-uuid.<nvmet's namespace UUID>); fio --verify through it; a namespace added through configfs
# appears and a removed one vanishes without a command (nvmet's Namespace Attribute Changed);
# mapd-status lists them; SIGTERM removes every device and link, and a restart brings the same
# names back.
. "$INTEROP/lib.sh"
NQN=nqn.2014-08.org.example:kernel-mapd
I="$BIN/nvmf-initiator"
U=00000000-0000-4000-8000-0000000000c1
LINKS=$WORK/by-id
SOCK=$WORK/mapd.sock
run "ublk driver" modprobe ublk_drv
run "backing files" truncate -s 128M "$WORK/d1.img"
run "second backing file" truncate -s 64M "$WORK/d2.img"
run "kernel target (configfs)" kernel_target_add tcp "$GUEST_IP" 4420 "$NQN" "$WORK/d1.img"

# wait_links N: until exactly N stable names exist (30 s at most).
wait_links() {
  _n=150
  while [ "$(ls "$LINKS" 2>/dev/null | grep -c '^nvmf-')" -ne "$1" ]; do
    _n=$((_n - 1))
    [ "$_n" -gt 0 ] || { ls -l "$LINKS"; cat "$LOG/mapd.log"; echo "FAIL: never $1 stable name(s)"; exit 1; }
    sleep 0.2
  done
  ls -l "$LINKS"
}
start_mapd() {
  start_bg mapd "$I" mapd -t tcp -a "$GUEST_IP" -s 4420 -q "nqn.2014-08.org.nvmexpress:uuid:$U" -I "$U" \
    -i 1 --ublk --link-dir "$LINKS" --status-socket "$SOCK"
}
start_mapd
wait_links 1
L1=$(ls "$LINKS" | grep '^nvmf-uuid\.')
check "the name is nvmet's namespace UUID" "[ -n '$L1' ]"
DEV1=$(basename "$(readlink "$LINKS/$L1")")
wait_block "$DEV1" 30
check "namespace 1 is 128 MiB" "[ \$(cat /sys/block/$DEV1/size) -eq 262144 ]"
run "fio 4k random write, verify" fio --name=r4k --filename="/dev/$DEV1" --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=4k --iodepth=16 --size=32M --verify=crc32c --do_verify=1
run "namespace 2 added on the target" sh -c "mkdir $NVMET/subsystems/$NQN/namespaces/2 &&
  echo $WORK/d2.img > $NVMET/subsystems/$NQN/namespaces/2/device_path &&
  echo 1 > $NVMET/subsystems/$NQN/namespaces/2/enable"
wait_links 2
L2=$(ls "$LINKS" | grep '^nvmf-' | grep -v "^$L1\$")
DEV2=$(basename "$(readlink "$LINKS/$L2")")
wait_block "$DEV2" 30
check "namespace 2 is 64 MiB" "[ \$(cat /sys/block/$DEV2/size) -eq 131072 ]"
expect "mapd-status lists both as mapped" "nsid 2 $L2 67108864 bytes .* mapped /dev/$DEV2" "$I" mapd-status --status-socket "$SOCK"
run "fio on namespace 2, verify" fio --name=n2 --filename="/dev/$DEV2" --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=16k --iodepth=8 --size=16M --verify=md5 --do_verify=1
run "namespace 2 removed on the target" sh -c "echo 0 > $NVMET/subsystems/$NQN/namespaces/2/enable &&
  rmdir $NVMET/subsystems/$NQN/namespaces/2"
wait_links 1
n=150
while [ -e "/dev/$DEV2" ] && [ "$n" -gt 0 ]; do n=$((n - 1)); sleep 0.2; done
check "namespace 2's device is gone" "[ ! -e /dev/$DEV2 ]"
check "namespace 1 stays" "[ -b /dev/$DEV1 ]"
stop_bg mapd
check "mapd drained on SIGTERM" "grep -q 'SIGTERM: draining' '$LOG/mapd.log'"
check "no stable name left" "[ \$(ls '$LINKS' | grep -c '^nvmf-') -eq 0 ]"
check "the device is gone" "[ ! -e /dev/$DEV1 ]"
check "the status socket is gone" "[ ! -e '$SOCK' ]"
log_clean mapd
mv "$LOG/mapd.log" "$LOG/mapd-first.log"
start_mapd
wait_links 1
check "the restart brings the same name back" "[ -e '$LINKS/$L1' ]"
stop_bg mapd
log_clean mapd
echo "mapd against the kernel target: all checks passed"
