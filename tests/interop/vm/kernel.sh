#!/bin/sh
# Unpacks the interop guest's kernel into a private folder, idempotently, without touching the
# system's packages: the newest 6.12 of trixie and trixie-security (its image and modules),
# `dpkg -x`ed, with a modules.dep that this machine's depmod writes. It is only ever booted
# under qemu (vm/boot.sh): the guest bind-mounts DIR/root/usr/lib/modules/K over /lib/modules/K.
#
#   vm/kernel.sh DIR      # prints the kernel release; DIR/release names it,
#                         # DIR/root/boot/vmlinuz-K and DIR/root/usr/lib/modules/K hold it
#
# Why trixie's and not bookworm-backports': the backports kernel (6.12.95) has the nvme-tcp
# host's page_frag_cache race ("nvme-tcp: fix usage of page_frag_cache", in 6.12.108), which
# printed "Bad page state" in the soak case again and again. MIN_SUBLEVEL keeps that fix in.
# A trixie kernel cannot be installed here (it pre-depends on a newer linux-base than
# bookworm's), and the guest needs nothing of it but the image and the modules.
set -eu
DIR=${1:?usage: kernel.sh DIR}
MIN_SUBLEVEL=108
STAMP=$DIR/.complete-v1
if [ -f "$STAMP" ]; then
  cat "$DIR/release"
  exit 0
fi
rm -rf "$DIR"
mkdir -p "$DIR/apt/etc/sources.list.d" "$DIR/apt/etc/preferences.d" "$DIR/apt/lists/partial" "$DIR/apt/cache/archives/partial" "$DIR/root"
touch "$DIR/apt/etc/sources.list"
cat > "$DIR/apt/etc/sources.list.d/trixie.sources" <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
set -- -o Dir::Etc="$DIR/apt/etc" -o Dir::State::Lists="$DIR/apt/lists" \
  -o Dir::Cache="$DIR/apt/cache" -o Dir::State::status=/dev/null -o APT::Architecture=amd64 \
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root
apt-get "$@" -qq update
# linux-image-amd64's candidate depends on exactly one versioned image package.
pkg=$(apt-cache "$@" depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-6\.12\.[0-9]*+deb13-amd64\)$/\1/p' | head -1)
[ -n "$pkg" ] || { echo "kernel.sh: trixie's linux-image-amd64 does not depend on a 6.12 image" >&2; exit 1; }
K=${pkg#linux-image-}
sub=${K#6.12.}
sub=${sub%%+*}
[ "$sub" -ge "$MIN_SUBLEVEL" ] || { echo "kernel.sh: trixie offers $K, older than 6.12.$MIN_SUBLEVEL" >&2; exit 1; }
(cd "$DIR/apt/cache/archives" && apt-get "$@" -qq download "$pkg")
dpkg -x "$DIR"/apt/cache/archives/"$pkg"_*.deb "$DIR/root"
rm -rf "$DIR/apt/cache/archives"
[ -r "$DIR/root/boot/vmlinuz-$K" ] && [ -d "$DIR/root/usr/lib/modules/$K/kernel" ] ||
  { echo "kernel.sh: $pkg has no vmlinuz-$K or modules" >&2; exit 1; }
# depmod looks under BASE/lib/modules; trixie's package puts them under usr/lib.
ln -s usr/lib "$DIR/root/lib"
depmod -b "$DIR/root" "$K"
echo "$K" > "$DIR/release"
touch "$STAMP"
echo "$K"
