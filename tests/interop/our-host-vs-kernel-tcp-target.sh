#!/usr/bin/env bash
# Host side of the "our host against the kernel's nvmet-tcp" check. Run while the guest
# job guest-kernel-tcp-target.sh is up (it touches $OUT/ready); touches $OUT/done at the end.
#   usage: our-host-vs-kernel-tcp-target.sh OUTDIR [PORT]   (PORT: the forward of guest 4420)
set -euo pipefail
OUT=$1
PORT=${2:-14420}
B=$(dirname "$0")/../../build/release/nvmf-initiator
N=nqn.2014-08.org.example:kernel
H=(-q nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555 -I 11111111-2222-4333-8444-555555555555)
C=(-t tcp -a 127.0.0.1 -s "$PORT")
trap 'touch "$OUT/done"' EXIT
for i in $(seq 120); do [ -e "$OUT/ready" ] && break; sleep 1; done
[ -e "$OUT/ready" ] || { echo "guest target never became ready"; exit 1; }
echo "== discover";  "$B" discover "${C[@]}" "${H[@]}" | tee /dev/stderr | grep -q "subnqn:  $N"
echo "== identify";  "$B" identify "${C[@]}" -n $N "${H[@]}" | grep -E "^(mn|fr|subnqn) "
echo "== write";     "$B" write "${C[@]}" -n $N "${H[@]}" --nsid 1 --lba 2048 --count 16 --pattern 0x3c
echo "== read back"; "$B" read "${C[@]}" -n $N "${H[@]}" --nsid 1 --lba 2048 --count 16 | head -1 | grep -q "3c 3c 3c 3c"
echo "== perf with verification"
"$B" perf "${C[@]}" -n $N "${H[@]}" --rw randwrite --bs 4k --iodepth 8 --runtime 5 --size 8M --verify | grep -E "errors=0|verify: OK"
echo "== perf with header and data digests"
"$B" perf "${C[@]}" -n $N "${H[@]}" --rw randread --bs 128k --iodepth 4 --runtime 5 --hdr-digest --data-digest | grep "errors=0"
echo OUR-HOST-VS-KERNEL-TARGET-OK
