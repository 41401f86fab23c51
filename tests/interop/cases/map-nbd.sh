# nvmf-initiator map (NBD on a Unix socket) with the kernel's nbd client: nbd-client with two
# connections (multi-conn) -> /dev/nbd0, fio --verify through it, discard, disconnect, and a
# SIGTERM that drains and exits cleanly.
. "$INTEROP/lib.sh"
I="$BIN/nvmf-initiator"
U=00000000-0000-4000-8000-0000000000b2
SOCK=$WORK/nbd.sock
run "nbd driver" modprobe nbd
start_bg map "$I" map -t loopback --namespace ram:256M -q "nqn.2014-08.org.nvmexpress:uuid:$U" -I "$U" \
  -i 2 --socket "$SOCK" --export-name disk
n=150
while ! grep -q "exported over NBD" "$LOG/map.log" 2>/dev/null; do
  n=$((n - 1))
  [ "$n" -gt 0 ] || { cat "$LOG/map.log"; echo "FAIL: map did not come up"; exit 1; }
  sleep 0.2
done
cat "$LOG/map.log"
run "nbd-client connects (2 connections)" nbd-client -u "$SOCK" /dev/nbd0 -N disk -C 2 -b 4096
wait_block nbd0 30
check "256 MiB" "[ \$(cat /sys/block/nbd0/size) -eq 524288 ]"
run "fio 4k random write, verify" fio --name=r4k --filename=/dev/nbd0 --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=4k --iodepth=32 --size=32M --verify=crc32c --do_verify=1
run "fio 128k sequential write, verify" fio --name=s128k --filename=/dev/nbd0 --direct=1 \
  --ioengine=libaio --rw=write --bs=128k --iodepth=8 --offset=64M --size=64M --verify=md5 --do_verify=1
run "fio 1m writes with fsync, verify" fio --name=big --filename=/dev/nbd0 --direct=1 \
  --ioengine=libaio --rw=randwrite --bs=1m --iodepth=4 --offset=128M --size=32M --fsync=2 \
  --verify=crc32c --do_verify=1
run "discard" blkdiscard -o 0 -l 4194304 /dev/nbd0
run "nbd-client disconnects" nbd-client -d /dev/nbd0
stop_bg map
check "the server drained on SIGTERM" "grep -q 'SIGTERM: draining' '$LOG/map.log'"
check "two or more connections, no failed request" "grep -qE '^stopped: ([2-9]|[1-9][0-9]+) connections, [0-9]+ requests \(0 failed\)' '$LOG/map.log'"
check "the socket is removed" "[ ! -e '$SOCK' ]"
if grep -nE 'ERROR|panicked' "$LOG/map.log"; then echo "FAIL: map logged the lines above"; exit 1; fi
echo "map (NBD, kernel nbd client): all checks passed"
