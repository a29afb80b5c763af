#!/usr/bin/env bash
# Build the insn_count qemu TCG plugin; print the .so path as the last stdout line.
#
# The plugin ABI is only guaranteed against the qemu-plugin.h of the very qemu
# that loads it, so the header is taken from the Debian source package whose
# version equals the installed qemu-user's source version, and the cache is
# keyed by that version (an apt upgrade of qemu-user rebuilds automatically).
#
# Cache: ${SPEC_VERIFY_CACHE:-$HOME/.cache/spec-verify}/insn_count/
#   qemu-<srcver>/qemu-plugin.h   the only file kept from the source package
#   insn_count-<hash>.so          hash of plugin source + header, so edits rebuild
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${SPEC_VERIFY_CACHE:-$HOME/.cache/spec-verify}/insn_count
mkdir -p "$cache"
t_start=$(date +%s.%N)
cold=0

log() { echo "insn_count/build.sh: $*" >&2; }

# Serialise concurrent builds (e.g. parallel test jobs) so they don't race on the cache.
exec 9>"$cache/.lock"
flock 9

"$here/../ensure_apt.sh" qemu-user >&2
# Source version (binNMU suffix like +b3 dropped): that is what apt-get source knows.
srcver=$(dpkg-query -W -f='${source:Version}' qemu-user)
srcver_noepoch=${srcver#*:}
hdr_dir=$cache/qemu-$srcver_noepoch
hdr=$hdr_dir/qemu-plugin.h

if [[ ! -s $hdr ]]; then
    cold=1
    t0=$(date +%s.%N)
    log "cold: fetching qemu-plugin.h from Debian source package qemu $srcver"
    . /etc/os-release
    codename=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
    mirror=${INSN_COUNT_DEB_MIRROR:-http://deb.debian.org}
    # Private apt state: the host's sources, lists and caches are never touched,
    # and only Sources indexes are fetched (no deb lines here).
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work"/{lists/partial,cache/archives/partial,parts,src}
    kr=/usr/share/keyrings/debian-archive-keyring.gpg
    cat >"$work/sources.list" <<SRC
deb-src [signed-by=$kr] $mirror/debian $codename main
deb-src [signed-by=$kr] $mirror/debian $codename-updates main
deb-src [signed-by=$kr] $mirror/debian-security $codename-security main
SRC
    apt_opts=(
        -o "Dir::Etc::SourceList=$work/sources.list"
        -o "Dir::Etc::SourceParts=$work/parts"
        -o "Dir::State::Lists=$work/lists"
        -o "Dir::Cache=$work/cache"
        -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
        -o "Debug::NoLocking=1"
        -o "APT::Sandbox::User=root"
    )
    apt-get "${apt_opts[@]}" update 2>&1 | tee "$work/update.log" >&2
    (cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only "qemu=$srcver" >&2)
    orig=$(ls "$work"/src/qemu_*.orig.tar.*)
    deb=$(ls "$work"/src/qemu_*.debian.tar.* 2>/dev/null || true)
    # A Debian patch to the header would make the orig copy wrong; fail loudly
    # rather than build a plugin against a mismatched ABI. (grep -c, not -q:
    # -q would exit early, SIGPIPE tar, and pipefail would hide the match.)
    touched=0
    [[ -z $deb ]] || touched=$(tar -xOf "$deb" --wildcards 'debian/patches/*' |
        grep -c '^+++ .*include/qemu/qemu-plugin\.h' || true)
    if (( touched > 0 )); then
        log "ERROR: a Debian patch in $deb touches qemu-plugin.h; apply it before use"
        exit 1
    fi
    mkdir -p "$hdr_dir"
    tar -xOf "$orig" --wildcards --no-anchored 'include/qemu/qemu-plugin.h' >"$hdr.tmp"
    [[ -s $hdr.tmp ]] || { log "ERROR: qemu-plugin.h not found in $orig"; exit 1; }
    mv "$hdr.tmp" "$hdr"
    # apt stores lists recompressed, so take the transfer size from apt's own
    # "Fetched" line and add the source files as downloaded.
    idx=$(sed -n 's/^Fetched \([0-9.]*\) \([kMG]\)B.*/\1 \2/p' "$work/update.log" |
          awk '{m=($2=="k")?1e3:($2=="M")?1e6:1e9; print int($1*m)}')
    dl=$(( ${idx:-0} + $(du -cb "$work"/src/* | tail -1 | cut -f1) ))
    t1=$(date +%s.%N)
    log "cold header fetch: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s," \
        "downloaded $(awk -v d="$dl" 'BEGIN{printf "%.1f", d/1e6}') MB (Sources indexes + qemu source package)"
fi

key=$(cat "$here/insn_count.c" "$hdr" | sha256sum | cut -c1-16)
so=$cache/insn_count-$key.so
if [[ ! -s $so ]]; then
    cold=1
    t0=$(date +%s.%N)
    if ! pkg-config --exists glib-2.0 2>/dev/null; then
        # qemu-plugin.h includes <glib.h>; only its headers are needed, not linking.
        log "glib-2.0 headers missing; installing libglib2.0-dev"
        "$here/../ensure_apt.sh" libglib2.0-dev pkg-config >&2
    fi
    gcc -O2 -Wall -Wextra -shared -fPIC -I"$hdr_dir" $(pkg-config --cflags glib-2.0) \
        -o "$so.tmp" "$here/insn_count.c"
    mv "$so.tmp" "$so"
    t1=$(date +%s.%N)
    log "compiled plugin in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s"
fi
if (( cold )); then
    log "cold build total: $(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
fi
echo "$so"
