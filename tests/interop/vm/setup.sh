#!/bin/sh
# Installs what the interop VM needs, idempotently (Debian 12, as root). The guest's 6.12
# kernel is not among them: vm/kernel.sh unpacks trixie's into a private folder.
#   - qemu-system-x86 (from backports when qemu-utils already came from there: the two must match);
#   - busybox-static and cpio for the initramfs;
#   - the guest-side peers: nvme-cli, fio, rdma-core tools, iproute2, kmod, e2fsprogs;
#   - Ceph: librbd-dev and librados-dev to build the target's `rbd` feature, and ceph-mon,
#     ceph-osd, ceph-common for the private cluster that case rbd-kernel-multipath starts in
#     the guest (scripts/ceph-test-cluster), as scripts/setup installs them.
set -eu
export DEBIAN_FRONTEND=noninteractive
BPO=bookworm-backports
updated=""
apt_update() { [ -n "$updated" ] || { apt-get update -qq; updated=1; }; }
if ! grep -rqs "$BPO" /etc/apt/sources.list /etc/apt/sources.list.d; then
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$BPO" > /etc/apt/sources.list.d/nvmf-interop-backports.sources
fi
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
  apt_update
  apt-get install -y -qq --no-install-recommends -t "$BPO" qemu-system-x86 >/dev/null
fi
need=""
for p in busybox-static cpio nvme-cli fio rdma-core ibverbs-utils rdmacm-utils iproute2 kmod e2fsprogs nbd-client util-linux \
  librbd-dev librados-dev ceph-mon ceph-osd ceph-common; do
  dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
  apt_update
  # shellcheck disable=SC2086 # word splitting intended: a package list
  apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
echo "interop vm: $(qemu-system-x86_64 --version | head -1)"
