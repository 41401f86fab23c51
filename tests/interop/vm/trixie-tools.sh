#!/bin/sh
# Unpacks the TLS peers bookworm lacks into a private folder, idempotently, without
# touching the system's packages: trixie's ktls-utils (tlshd, the kernel's TLS handshake
# agent) and nvme-cli 2.13 (`connect --tls`, `gen-tls-key`, `check-tls-key`), with the
# libraries they load and trixie's own dynamic loader. apt-get runs on a private state
# folder (its own sources list, package lists and cache); the packages are `dpkg -x`ed.
#
#   vm/trixie-tools.sh DIR      # prints nothing but errors; DIR/root holds the tree
#
# Run a tool as  DIR/run tlshd ...  or  DIR/run nvme ...  (a wrapper that starts it with
# DIR/root's ld-linux-x86-64.so.2 --library-path ...).
set -eu
DIR=${1:?usage: trixie-tools.sh DIR}
ROOT=$DIR/root
STAMP=$DIR/.complete-v1
[ -f "$STAMP" ] && exit 0
rm -rf "$DIR"
mkdir -p "$DIR/apt/etc/sources.list.d" "$DIR/apt/etc/preferences.d" "$DIR/apt/lists/partial" "$DIR/apt/cache/archives/partial" "$ROOT"
touch "$DIR/apt/etc/sources.list"
printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  > "$DIR/apt/etc/sources.list.d/trixie.sources"
set -- -o Dir::Etc="$DIR/apt/etc" -o Dir::State::Lists="$DIR/apt/lists" \
  -o Dir::Cache="$DIR/apt/cache" -o Dir::State::status=/dev/null -o APT::Architecture=amd64 \
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root
apt-get "$@" -qq update
# The tools and every shared library they need (the closure of their Depends, without
# what only maintainer scripts use).
pkgs=$(apt-cache "$@" depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances ktls-utils nvme-cli libnvme1t64 2>/dev/null |
  grep -v '^ ' | grep -v '^<' | sort -u |
  grep -E '^(ktls-utils|nvme-cli|libc6|gcc-14-base|lib)' |
  grep -Ev '^lib(pam|semanage|sepol|debian|debconf|newt|slang|textwrap|systemd-shared|db5|apparmor|audit|seccomp|readline|cap-ng|crypt)')
(cd "$DIR/apt/cache/archives" && apt-get "$@" -qq download $pkgs)
for deb in "$DIR"/apt/cache/archives/*.deb; do
  dpkg -x "$deb" "$ROOT"
done
cat > "$DIR/run" <<RUN
#!/bin/sh
# Starts trixie's TOOL from $ROOT with trixie's loader and libraries.
tool=\$1; shift
for d in usr/sbin usr/bin sbin bin; do
  [ -x "$ROOT/\$d/\$tool" ] && exec "$ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \\
    --library-path "$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/lib/x86_64-linux-gnu" "$ROOT/\$d/\$tool" "\$@"
done
echo "trixie-tools: no \$tool in $ROOT" >&2
exit 127
RUN
chmod +x "$DIR/run"
"$DIR/run" tlshd --help >/dev/null 2>&1 || "$DIR/run" tlshd -h 2>&1 | grep -qi usage
"$DIR/run" nvme connect --help 2>&1 | grep -q -- --tls-key
rm -rf "$DIR/apt"
touch "$STAMP"
