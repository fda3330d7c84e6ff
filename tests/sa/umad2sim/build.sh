#!/bin/bash
# tests/sa/umad2sim/build.sh OUTDIR - build the fixed umad2sim shim into
# OUTDIR/libumad2sim.so from ibsim's source plus rmpp-and-full-mad.patch.
#
# Source, in this order:
#   1. Debian's source package of the installed ibsim-utils (apt-get source;
#      deb-src lines are added for the running release when none exist);
#   2. the copy of the four upstream files of ibsim 0.10 (Debian bookworm's
#      version) kept in ibsim-0.10/ next to this script, when apt cannot
#      deliver the source (no network, or a mirror without source tarballs).
# Prints "source: ..." saying which one was used.  Exit status 0 only when
# the patched shim was built.  Run by .ci/setup; safe to rerun.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
PATCH=$HERE/rmpp-and-full-mad.patch
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_source() {
    # Debian's source of the installed ibsim, extracted (with Debian's own
    # patches) under $OUT/apt; prints the source tree's path.
    local ver codename list uri
    ver=$(dpkg-query -W -f='${Version}' ibsim-utils 2>/dev/null) || return 1
    command -v dpkg-source >/dev/null || return 1
    if ! grep -rqs '^\(Types:.*deb-src\|deb-src\)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
        [ -n "$codename" ] || return 1
        # the archive the machine already installs its packages from
        uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
        [ -n "$uri" ] || uri=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' \
            /etc/apt/sources.list 2>/dev/null || true)
        [ -n "$uri" ] || return 1
        list=/etc/apt/sources.list.d/rdma-ci-src.sources
        echo "adding deb-src lines for $codename in $list" >&2
        printf '%s\n' "# Added by rdma's tests/sa/umad2sim/build.sh (apt-get source ibsim)." \
            "Types: deb-src" "URIs: $uri" "Suites: $codename" \
            "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
            | $SUDO tee "$list" >/dev/null
        $SUDO timeout 300 apt-get update -qq >&2 || return 1
    fi
    rm -rf "$OUT/apt" && mkdir -p "$OUT/apt"
    (cd "$OUT/apt" && timeout 300 apt-get source -qq "ibsim=$ver" >&2) || return 1
    local tree
    tree=$(find "$OUT/apt" -mindepth 1 -maxdepth 1 -type d -name 'ibsim-*' | head -1)
    [ -n "$tree" ] && [ -f "$tree/umad2sim/umad2sim.c" ] || return 1
    echo "$tree"
}

build_from() {
    local src=$1 work=$OUT/work
    rm -rf "$work" && mkdir -p "$work/umad2sim" "$work/include"
    cp "$src/umad2sim/umad2sim.c" "$src/umad2sim/sim_client.c" \
        "$src/umad2sim/sim_client.h" "$work/umad2sim/"
    cp "$src/include/ibsim.h" "$work/include/"
    (cd "$work" && patch -p1 --no-backup-if-mismatch -s < "$PATCH") || return 1
    gcc -shared -fpic -O2 -g -Wall -I"$work/umad2sim" -I"$work/include" \
        "$work/umad2sim/umad2sim.c" "$work/umad2sim/sim_client.c" \
        -o "$OUT/libumad2sim.so.new" -libmad -libumad -lpthread -ldl || return 1
    mv "$OUT/libumad2sim.so.new" "$OUT/libumad2sim.so"
}

if tree=$(apt_source) && build_from "$tree"; then
    echo "source: Debian source package $(basename "$tree") (apt-get source)"
else
    echo "source: apt-get source ibsim failed or its umad2sim does not take the patch;" \
        "used the upstream ibsim 0.10 files in $HERE/ibsim-0.10"
    build_from "$HERE/ibsim-0.10"
fi
echo "built $OUT/libumad2sim.so"
