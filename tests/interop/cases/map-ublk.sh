# nvmf-initiator map --ublk: a namespace (loopback transport, RAM) as /dev/ublkbN with one ublk
# queue per NVMe I/O queue and the queue's depth; fio --verify through it (4 KiB random, 128 KiB
# sequential), discard and write-zeroes, then SIGTERM drains and removes the device.
. "$INTEROP/lib.sh"
I="$BIN/nvmf-initiator"
U=00000000-0000-4000-8000-0000000000b1
run "ublk driver" modprobe ublk_drv
start_bg map "$I" map -t loopback --namespace ram:256M -q "nqn.2014-08.org.nvmexpress:uuid:$U" -I "$U" \
  -i 2 -Q 64 --ublk
n=150
while ! grep -q "exported as" "$LOG/map.log" 2>/dev/null; do
  n=$((n - 1))
  [ "$n" -gt 0 ] || { cat "$LOG/map.log"; echo "FAIL: map --ublk did not come up"; exit 1; }
  sleep 0.2
done
cat "$LOG/map.log"
DEV=$(sed -n 's|.* exported as /dev/\(ublkb[0-9]*\) .*|\1|p' "$LOG/map.log")
check "a ublk block device was named" "[ -n '$DEV' ]"
wait_block "$DEV" 30
check "256 MiB" "[ \$(cat /sys/block/$DEV/size) -eq 524288 ]"
check "two hardware queues (one per NVMe I/O queue)" "[ \$(ls -d /sys/block/$DEV/mq/* | wc -l) -eq 2 ]"
check "queue depth 63 (queue size 64 - 1)" "[ \$(cat /sys/block/$DEV/mq/0/nr_tags) -eq 63 ]"
check "512-byte logical blocks" "[ \$(cat /sys/block/$DEV/queue/logical_block_size) -eq 512 ]"
check "discard is advertised" "[ \$(cat /sys/block/$DEV/queue/discard_max_bytes) -gt 0 ]"
check "write cache with FUA" "grep -q 'write back' /sys/block/$DEV/queue/write_cache"
run "fio 4k random write, verify" fio --name=r4k --filename="/dev/$DEV" --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=4k --iodepth=32 --size=32M --verify=crc32c --do_verify=1 --numjobs=1
run "fio 128k sequential write, verify" fio --name=s128k --filename="/dev/$DEV" --direct=1 \
  --ioengine=libaio --rw=write --bs=128k --iodepth=8 --offset=64M --size=64M --verify=md5 --do_verify=1
run "fio 512k writes with fsync (split by MDTS), verify" fio --name=big --filename="/dev/$DEV" \
  --direct=1 --ioengine=libaio --rw=randwrite --bs=512k --iodepth=4 --offset=128M --size=32M \
  --fsync=2 --verify=crc32c --do_verify=1
run "write zeroes" blkdiscard -z -o 0 -l 1048576 "/dev/$DEV"
run "zeroes read back" cmp -n 1048576 "/dev/$DEV" /dev/zero
run "discard" blkdiscard -o 1048576 -l 4194304 "/dev/$DEV"
stop_bg map
check "the server drained on SIGTERM" "grep -q 'SIGTERM: draining' '$LOG/map.log'"
check "the server reported its stop" "grep -q '^stopped:' '$LOG/map.log'"
check "the device is gone" "[ ! -e /dev/$DEV ]"
if grep -nE 'ERROR|panicked' "$LOG/map.log"; then echo "FAIL: map logged the lines above"; exit 1; fi
echo "map --ublk: all checks passed"
