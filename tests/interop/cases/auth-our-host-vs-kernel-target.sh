# DH-HMAC-CHAP (issue 12): nvmf-initiator authenticates to the Linux kernel target (nvmet-tcp,
# configfs `hosts/<nqn>/dhchap_{key,ctrl_key,hash,dhgroup}`, the subsystem restricted to that
# host). For each hash (sha256/384/512) x DH group (null, ffdhe2048, ffdhe8192) x direction
# the target is reconfigured and our host identifies the controller; a write/read/compare
# and a verifying perf run go through an authenticated bidirectional association; a wrong
# key and a wrong controller key are refused with an error that says so.
. "$INTEROP/lib.sh"
NQN=nqn.2014-08.org.example:kernel-auth
# Two hosts: A authenticates itself only, B also asks the controller to (nvmet cannot
# drop a controller key once set, so each direction has its own host).
HOST=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000a1
HOSTB=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000b1
I="$BIN/nvmf-initiator"
C="-t tcp -a $GUEST_IP -s 4420 -n $NQN -q $HOST -I 00000000-0000-4000-8000-0000000000a1"
CB="-t tcp -a $GUEST_IP -s 4420 -n $NQN -q $HOSTB -I 00000000-0000-4000-8000-0000000000b1"
H=$NVMET/hosts/$HOST
HB=$NVMET/hosts/$HOSTB
run "backing file" truncate -s 64M "$WORK/disk.img"
run "kernel target (configfs)" kernel_target_add tcp "$GUEST_IP" 4420 "$NQN" "$WORK/disk.img"
run "host entries" mkdir "$H" "$HB"
run "only those hosts" sh -c "echo 0 > $NVMET/subsystems/$NQN/attr_allow_any_host && ln -s $H $NVMET/subsystems/$NQN/allowed_hosts/$HOST && ln -s $HB $NVMET/subsystems/$NQN/allowed_hosts/$HOSTB"
KEY=$(nvme gen-dhchap-key --hmac=1 --nqn=$HOST)
KEYB=$(nvme gen-dhchap-key --hmac=2 --nqn=$HOSTB)
CKEY=$(nvme gen-dhchap-key --hmac=3 --key-length=64)
run "host keys" sh -c "echo '$KEY' > $H/dhchap_key && echo '$KEYB' > $HB/dhchap_key && echo '$CKEY' > $HB/dhchap_ctrl_key"

for hash in "hmac(sha256)" "hmac(sha384)" "hmac(sha512)"; do
  for group in null ffdhe2048 ffdhe8192; do
    run "nvmet: $hash $group" sh -c "for h in $H $HB; do echo '$hash' > \$h/dhchap_hash && echo $group > \$h/dhchap_dhgroup; done"
    expect "identify, $hash $group, host only" "subnqn.*$NQN" $I identify $C -S "$KEY"
    expect "identify, $hash $group, bidirectional" "subnqn.*$NQN" $I identify $CB -S "$KEYB" -C "$CKEY"
  done
done

run "test data" dd if=/dev/urandom of="$WORK/data" bs=4096 count=32 status=none
run "write (bidirectional)" "$I" write $CB -S "$KEYB" -C "$CKEY" --nsid 1 --lba 64 --count 32 --input "$WORK/data"
run "read back" "$I" read $CB -S "$KEYB" -C "$CKEY" --nsid 1 --lba 64 --count 32 --output "$WORK/back"
run "what was read is what was written" cmp "$WORK/data" "$WORK/back"
expect "perf randwrite with verification (authenticated I/O queues)" "errors=0" \
  $I perf $CB -S "$KEYB" -C "$CKEY" --rw randwrite --bs 4k --iodepth 8 --runtime 4 --size 8M --verify

WRONG=$(nvme gen-dhchap-key --hmac=1 --nqn=$HOST)
expect_fail "wrong key" "authentication failed" $I identify $C -S "$WRONG"
expect_fail "wrong controller key" "wrong controller key" $I identify $CB -S "$KEYB" -C "$(nvme gen-dhchap-key --hmac=3 --key-length=64)"
expect_fail "no key" "requires DH-HMAC-CHAP" $I identify $C
run "cleanup host links" sh -c "rm $NVMET/subsystems/$NQN/allowed_hosts/$HOST $NVMET/subsystems/$NQN/allowed_hosts/$HOSTB && rmdir $H $HB"
echo "our host vs the kernel target with DH-HMAC-CHAP: all checks passed"
