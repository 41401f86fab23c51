# connect-all and mapd --ublk against the Linux kernel's NVMe/TCP target (nvmet, configfs): two
# subsystems, each on two ports (port 2's ANA group non-optimized), two namespaces each, found
# through the two discovery controllers of a discovery.conf. connect-all lists both subsystems
# with both paths and their ANA states; mapd maps the four namespaces as ublk devices with stable
# links (nvmf-uuid.<nvmet's namespace UUID>); a namespace added through configfs appears and a
# removed one vanishes without a command (nvmet's Namespace Attribute Changed); verifying fio runs
# on two devices while port 1 drops both subsystems (nvmet ends their controllers) and takes
# them back; SIGTERM removes every device and link, and a restart brings the same names back.
. "$INTEROP/lib.sh"
S1=nqn.2014-08.org.example:kernel-mapd-one
S2=nqn.2014-08.org.example:kernel-mapd-two
I="$BIN/nvmf-initiator"
U=00000000-0000-4000-8000-0000000000c1
HOST="-q nqn.2014-08.org.nvmexpress:uuid:$U -I $U"
LINKS=$WORK/by-id
SOCK=$WORK/mapd.sock
run "ublk driver" modprobe ublk_drv

# ns_add SUBNQN NSID FILE: a buffered file namespace, enabled.
ns_add() {
  mkdir "$NVMET/subsystems/$1/namespaces/$2" &&
    echo "$3" > "$NVMET/subsystems/$1/namespaces/$2/device_path" &&
    echo 1 > "$NVMET/subsystems/$1/namespaces/$2/buffered_io" &&
    echo 1 > "$NVMET/subsystems/$1/namespaces/$2/enable"
}
# port_add ID TRSVCID: a TCP port on the guest's address.
port_add() {
  mkdir "$NVMET/ports/$1" && echo tcp > "$NVMET/ports/$1/addr_trtype" &&
    echo ipv4 > "$NVMET/ports/$1/addr_adrfam" && echo "$GUEST_IP" > "$NVMET/ports/$1/addr_traddr" &&
    echo "$2" > "$NVMET/ports/$1/addr_trsvcid"
}
# link PORT SUBNQN / unlink PORT SUBNQN: export a subsystem on a port, or stop.
link() { ln -s "$NVMET/subsystems/$2" "$NVMET/ports/$1/subsystems/$2"; }
unlink_sub() { rm "$NVMET/ports/$1/subsystems/$2"; }

for f in a1 a2 b1 b2 a3; do run "backing file $f" truncate -s 64M "$WORK/$f.img"; done
for s in "$S1" "$S2"; do
  run "subsystem $s" sh -c "mkdir $NVMET/subsystems/$s && echo 1 > $NVMET/subsystems/$s/attr_allow_any_host"
done
run "namespace 1 of $S1" ns_add "$S1" 1 "$WORK/a1.img"
run "namespace 2 of $S1" ns_add "$S1" 2 "$WORK/a2.img"
run "namespace 1 of $S2" ns_add "$S2" 1 "$WORK/b1.img"
run "namespace 2 of $S2" ns_add "$S2" 2 "$WORK/b2.img"
run "port 1" port_add 1 4420
run "port 2" port_add 2 4421
run "port 2's ANA group non-optimized" sh -c "echo non-optimized > $NVMET/ports/2/ana_groups/1/ana_state"
for p in 1 2; do for s in "$S1" "$S2"; do run "export $s on port $p" link "$p" "$s"; done; done
printf -- '-t tcp -a %s -s 4420\n-t tcp -a %s -s 4421\n' "$GUEST_IP" "$GUEST_IP" > "$WORK/discovery.conf"

expect "connect-all: both subsystems, both paths, ANA states" "non-optimized" \
  "$I" connect-all --discovery-conf "$WORK/discovery.conf" $HOST -o json
check "connect-all: two subsystems with two live paths each" "[ \$(grep -c '\"state\": \"live\"' '$WORK/.expect.out') -eq 4 ]"
check "connect-all: two optimized paths" "[ \$(grep -c '\"ana_state\": \"optimized\"' '$WORK/.expect.out') -eq 2 ]"

start_mapd() {
  start_bg mapd "$I" mapd --discovery-conf "$WORK/discovery.conf" $HOST -i 1 -c 1 -l 60 --ublk \
    --link-dir "$LINKS" --status-socket "$SOCK"
}
start_mapd
mapd_wait_links "$LINKS" 4
NAMES=$(ls "$LINKS" | grep '^nvmf-' | sort)
check "the names are nvmet's namespace UUIDs" "[ \$(ls '$LINKS' | grep -c '^nvmf-uuid\.') -eq 4 ]"
expect "mapd-status: both paths with their ANA states" "trsvcid=4421 live non-optimized" \
  "$I" mapd-status --status-socket "$SOCK"
D1=$(mapd_dev "$SOCK" "$S1" 1)
D2=$(mapd_dev "$SOCK" "$S2" 1)
wait_block "$D1" 30
wait_block "$D2" 30
check "64 MiB each" "[ \$(cat /sys/block/$D1/size) -eq 131072 ] && [ \$(cat /sys/block/$D2/size) -eq 131072 ]"

run "namespace 3 added on the target" ns_add "$S1" 3 "$WORK/a3.img"
mapd_wait_links "$LINKS" 5
D3=$(mapd_dev "$SOCK" "$S1" 3)
wait_block "$D3" 30
run "fio on namespace 3, verify" fio --name=n3 --filename="/dev/$D3" --direct=1 --ioengine=libaio \
  --rw=randwrite --bs=16k --iodepth=8 --size=16M --verify=md5 --do_verify=1
run "namespace 3 removed on the target" sh -c "echo 0 > $NVMET/subsystems/$S1/namespaces/3/enable &&
  rmdir $NVMET/subsystems/$S1/namespaces/3"
mapd_wait_links "$LINKS" 4
n=150
while [ -e "/dev/$D3" ] && [ "$n" -gt 0 ]; do n=$((n - 1)); sleep 0.2; done
check "namespace 3's device is gone" "[ ! -e /dev/$D3 ]"
check "the same four names" "[ \"\$(ls '$LINKS' | grep '^nvmf-' | sort)\" = '$NAMES' ]"

for d in "$D1" "$D2"; do
  start_bg "fio-$d" fio --name="fo-$d" --filename="/dev/$d" --direct=1 --ioengine=libaio --rw=randwrite \
    --bs=4k --iodepth=16 --size=48M --verify=crc32c --verify_fatal=1 --do_verify=1
done
sleep 2
run "port 1 drops both subsystems" sh -c "rm $NVMET/ports/1/subsystems/$S1 $NVMET/ports/1/subsystems/$S2"
sleep 4
run "port 1 exports them again" sh -c "ln -s $NVMET/subsystems/$S1 $NVMET/ports/1/subsystems/$S1 &&
  ln -s $NVMET/subsystems/$S2 $NVMET/ports/1/subsystems/$S2"
for d in "$D1" "$D2"; do fio_verified "fio-$d"; done
check "the mappings lost their queues and went on" "grep -q 'I/O queue lost' '$LOG/mapd.log'"

stop_bg mapd
check "mapd drained on SIGTERM" "grep -q 'SIGTERM: draining' '$LOG/mapd.log'"
check "no stable name left" "[ \$(ls '$LINKS' | grep -c '^nvmf-') -eq 0 ]"
check "the devices are gone" "[ ! -e /dev/$D1 ] && [ ! -e /dev/$D2 ]"
check "the status socket is gone" "[ ! -e '$SOCK' ]"
mv "$LOG/mapd.log" "$LOG/mapd-first.log"
start_mapd
mapd_wait_links "$LINKS" 4
check "the restart brings the same names back" "[ \"\$(ls '$LINKS' | grep '^nvmf-' | sort)\" = '$NAMES' ]"
stop_bg mapd
for l in mapd mapd-first; do
  if grep -nE 'ERROR|panicked' "$LOG/$l.log"; then echo "FAIL: $l logged the lines above"; exit 1; fi
done
echo "connect-all and mapd against the kernel target: all checks passed"
