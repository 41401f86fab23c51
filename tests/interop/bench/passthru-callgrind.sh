# Benchmark (run only when named: tests/interop/run bench/passthru-callgrind): user-space
# instructions per 4 KiB random read of nvmf-target, counted by callgrind inside the guest
# (deterministic under TCG, where no hardware counter exists), on qemu's emulated NVMe SSD
# (namespace 1) served three ways: the block path (io_uring reads on /dev/nvmeXnY), the
# same block namespace with `io_path: passthru` (NVMe commands by io_uring passthrough on
# /dev/ngXnY), and the controller as a passthru subsystem. The kernel's part (block layer
# or not) is not in these figures; they show what the passthrough path costs the target.
. "$INTEROP/lib.sh"
ROOT=$(cd "$INTEROP/../.." && pwd)
run "the NVMe PCI driver" modprobe nvme
LOCAL=
_n=150
while [ $_n -gt 0 ]; do
  for _c in /sys/class/nvme/nvme*; do
    [ "$(cat "$_c/transport" 2>/dev/null)" = pcie ] && LOCAL=/dev/${_c##*/}
  done
  [ -n "$LOCAL" ] && [ -c "/dev/ng${LOCAL#/dev/nvme}n1" ] && break
  sleep 0.2
  _n=$((_n - 1))
done
[ -n "$LOCAL" ] || { echo "FAIL: no local NVMe controller"; exit 1; }
DISK=/dev/$(nvme_ns_dev "$(cat "/sys/class/nvme/${LOCAL#/dev/}/subsysnqn")" 1) || { echo "FAIL: no disk of NSID 1"; exit 1; }
echo "controller $LOCAL, namespace 1 $DISK"
cd "$ROOT" || exit 1
export BENCH_NO_BUILD=1 BENCH_BS=4k BENCH_QD=16 BENCH_SHORT=${BENCH_SHORT:-3} BENCH_LONG=${BENCH_LONG:-9} BENCH_BIN=$BIN
for way in block io_path_passthru passthru_subsystem; do
  case $way in
    block) env BENCH_DEVICE="$DISK" scripts/bench-callgrind target randread ;;
    io_path_passthru) env BENCH_DEVICE="$DISK" BENCH_IO_PATH=passthru scripts/bench-callgrind target randread ;;
    passthru_subsystem) env BENCH_PASSTHRU="$LOCAL" scripts/bench-callgrind target randread ;;
  esac > "$LOG/$way.txt" 2>&1 || { cat "$LOG/$way.txt"; echo "FAIL: $way"; exit 1; }
  echo "$way: $(tail -n 1 "$LOG/$way.txt")"
done
rmmod nvme 2> /dev/null
