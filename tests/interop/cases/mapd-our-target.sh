# connect-all and mapd --ublk against nvmf-target in this guest: two subsystems, each exported on
# two ports (port 2's ANA group non-optimized), two namespaces each, found through the two
# discovery controllers of a discovery.conf. connect-all lists both subsystems with both paths
# and their ANA states; all four namespaces become ublk devices with stable
# names; mapd-status lists both paths of each subsystem; `ctl add-ns` / `ctl remove-ns` make a
# device appear and vanish without a command; verifying fio runs on two devices while port 1 is
# removed (every mapping fails over to port 2) and added back; SIGTERM removes every device, and
# a restart brings the same names back.
. "$INTEROP/lib.sh"
S1=nqn.2024-01.io.nvmf-rs:mapd-one
S2=nqn.2024-01.io.nvmf-rs:mapd-two
T="$BIN/nvmf-target"
I="$BIN/nvmf-initiator"
CTL="$WORK/ctl.sock"
U=00000000-0000-4000-8000-0000000000c2
LINKS=$WORK/by-id
SOCK=$WORK/mapd.sock

for f in s1n1 s1n2 s2n1 s2n2 s1n3; do truncate -s 64M "$WORK/$f.img"; done
cat > "$WORK/target.yaml" <<CFG
ports:
  - { portid: 1, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4420", subsystems: [$S1, $S2] }
  - { portid: 2, trtype: tcp, adrfam: ipv4, traddr: $GUEST_IP, trsvcid: "4421", subsystems: [$S1, $S2],
      ana_groups: [{ grpid: 1, state: non-optimized }] }
subsystems:
  - nqn: $S1
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $WORK/s1n1.img }
      - { nsid: 2, device_path: $WORK/s1n2.img }
  - nqn: $S2
    allow_any_host: true
    namespaces:
      - { nsid: 1, device_path: $WORK/s2n1.img }
      - { nsid: 2, device_path: $WORK/s2n2.img }
CFG
printf -- '-t tcp -a %s -s 4420\n-t tcp -a %s -s 4421\n' "$GUEST_IP" "$GUEST_IP" > "$WORK/discovery.conf"
run "ublk driver" modprobe ublk_drv
start_bg target "$T" --config "$WORK/target.yaml" --ctl-socket "$CTL"
wait_port "$GUEST_IP" 4420
wait_port "$GUEST_IP" 4421

expect "connect-all: both subsystems with both paths and their ANA states" "non-optimized" \
  "$I" connect-all --discovery-conf "$WORK/discovery.conf" -q "nqn.2014-08.org.nvmexpress:uuid:$U" -I "$U" -o json
check "connect-all: four live paths" "[ \$(grep -c '\"state\": \"live\"' '$WORK/.expect.out') -eq 4 ]"
check "connect-all: two optimized" "[ \$(grep -c '\"ana_state\": \"optimized\"' '$WORK/.expect.out') -eq 2 ]"
start_mapd() {
  start_bg mapd "$I" mapd --discovery-conf "$WORK/discovery.conf" -q "nqn.2014-08.org.nvmexpress:uuid:$U" \
    -I "$U" -i 1 -c 1 -l 60 --ublk --link-dir "$LINKS" --status-socket "$SOCK"
}
start_mapd
mapd_wait_links "$LINKS" 4
NAMES=$(ls "$LINKS" | grep '^nvmf-' | sort)
expect "mapd-status: both paths of each subsystem with their ANA state" "path tcp traddr=$GUEST_IP,trsvcid=4421 live non-optimized" \
  "$I" mapd-status --status-socket "$SOCK"
check "four namespaces mapped" "[ \$('$I' mapd-status --status-socket '$SOCK' | grep -c ' mapped /dev/ublkb') -eq 4 ]"
D1=$(mapd_dev "$SOCK" "$S1" 1)
D2=$(mapd_dev "$SOCK" "$S2" 1)
wait_block "$D1" 30
wait_block "$D2" 30
check "two different devices" "[ -n '$D1' ] && [ -n '$D2' ] && [ '$D1' != '$D2' ]"
check "64 MiB each" "[ \$(cat /sys/block/$D1/size) -eq 131072 ] && [ \$(cat /sys/block/$D2/size) -eq 131072 ]"

run "ctl add-ns" "$T" ctl --socket "$CTL" add-ns "$S1" "$WORK/s1n3.img" --nsid 3
mapd_wait_links "$LINKS" 5
run "ctl remove-ns" "$T" ctl --socket "$CTL" remove-ns "$S1" 3
mapd_wait_links "$LINKS" 4
check "the same four names" "[ \"\$(ls '$LINKS' | grep '^nvmf-' | sort)\" = '$NAMES' ]"

for d in "$D1" "$D2"; do
  start_bg "fio-$d" fio --name="fo-$d" --filename="/dev/$d" --direct=1 --ioengine=libaio --rw=randwrite \
    --bs=4k --iodepth=16 --size=48M --verify=crc32c --verify_fatal=1 --do_verify=1 --time_based=0
done
sleep 2
run "port 1 removed (its connections cut)" "$T" ctl --socket "$CTL" remove-port 1
sleep 4
run "port 1 back" "$T" ctl --socket "$CTL" add-port 1 tcp "$GUEST_IP" 4420
run "S1 on port 1" "$T" ctl --socket "$CTL" link-subsystem 1 "$S1"
run "S2 on port 1" "$T" ctl --socket "$CTL" link-subsystem 1 "$S2"
for d in "$D1" "$D2"; do fio_verified "fio-$d"; done
check "the mappings reconnected" "grep -q 'I/O queue lost' '$LOG/mapd.log'"
check "still four devices" "[ \$('$I' mapd-status --status-socket '$SOCK' | grep -c ' mapped /dev/ublkb') -eq 4 ]"

stop_bg mapd
check "no stable name left" "[ \$(ls '$LINKS' | grep -c '^nvmf-') -eq 0 ]"
check "the devices are gone" "[ ! -e /dev/$D1 ] && [ ! -e /dev/$D2 ]"
mv "$LOG/mapd.log" "$LOG/mapd-first.log"
start_mapd
mapd_wait_links "$LINKS" 4
check "the restart brings the same names back" "[ \"\$(ls '$LINKS' | grep '^nvmf-' | sort)\" = '$NAMES' ]"
stop_bg mapd
stop_bg target
# Removing port 1 warns by design (its controllers end); nothing may be an error.
for l in target mapd mapd-first; do
  if grep -nE 'ERROR|panicked' "$LOG/$l.log"; then echo "FAIL: $l logged the lines above"; exit 1; fi
done
echo "mapd against our target: all checks passed"
