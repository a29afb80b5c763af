#!/usr/bin/env bash
# Count executed aarch64 instructions inside named functions of a program run
# under qemu-aarch64 (user mode), e.g. to get instructions per element of a
# SIMD kernel (mark kernels noinline so each is one symbol).
#
#   count.sh BINARY SYMBOL... [-- ARGS...]
#
# stdout: one "SYMBOL COUNT" line per SYMBOL, in the order given. The program's
# own stdout is sent to stderr so that stdout stays machine-readable.
# Exit status: the program's (counts are printed even when it fails).
# Env: QEMU_CPU (default cortex-a72; neoverse-n1 for armv8.2 code).
#
# Assumption: BINARY is a static, non-PIE aarch64 ELF (ET_EXEC, no program
# interpreter; build with -static, which gcc makes non-PIE). Only then are the
# link-time addresses from nm the run-time addresses of the code, with no
# load bias and no shared libraries whose code would be outside BINARY.
# Counts cover only the instructions inside each function's [addr, addr+size):
# time spent in callees (libc, other functions) is not included.
# Guests must be single-threaded (OMP_NUM_THREADS=1): see insn_count.c.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "count.sh: $*" >&2; exit 2; }

(( $# >= 2 )) || die "usage: count.sh BINARY SYMBOL... [-- ARGS...]"
bin=$1; shift
[[ -f $bin ]] || die "no such file: $bin"
syms=()
while (( $# )) && [[ $1 != -- ]]; do syms+=("$1"); shift; done
(( $# )) && shift   # drop "--"
(( ${#syms[@]} )) || die "no SYMBOL given"

nm=${NM:-aarch64-linux-gnu-nm}
readelf=${READELF:-aarch64-linux-gnu-readelf}
hdr=$("$readelf" -h "$bin") || die "not an ELF file: $bin"
grep -q 'Machine:.*AArch64' <<<"$hdr" || die "$bin is not an AArch64 ELF"
grep -q 'Type:.*EXEC' <<<"$hdr" || die "$bin is not ET_EXEC (PIE or shared object?): link with -static"
if "$readelf" -lW "$bin" | grep -q 'INTERP'; then
    die "$bin is dynamically linked: link with -static"
fi

syms_out=$("$nm" -S --defined-only "$bin")
ranges=()
for s in "${syms[@]}"; do
    # Lines with a size column are "ADDR SIZE TYPE NAME"; a symbol listed
    # twice (static functions of the same name in two files) is ambiguous.
    hits=$(awk -v s="$s" 'NF == 4 && $4 == s' <<<"$syms_out")
    [[ -n $hits ]] || die "symbol '$s' not found with a size in $bin (inlined? mark it noinline)"
    (( $(wc -l <<<"$hits") == 1 )) || die "symbol '$s' is ambiguous in $bin:"$'\n'"$hits"
    read -r addr size type _ <<<"$hits"
    [[ $type == [TtWw] ]] || die "symbol '$s' is not code (nm type $type)"
    (( 16#$size > 0 )) || die "symbol '$s' has size 0"
    ranges+=("range=$s:0x$addr:$(printf '0x%x' $(( 16#$addr + 16#$size )))")
done

so=$("$here/build.sh" | tail -1)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# qemu parses -plugin as QemuOpts: "," separates keys and ",," is a literal comma.
plugin_arg="${so//,/,,},$(IFS=,; echo "${ranges[*]}"),out=${out//,/,,}"

# No "-d plugin": the plugin writes its counts to out= itself, not through
# qemu_plugin_outs (which is a qemu log channel and needs "-d plugin").
rc=0
qemu-aarch64 -cpu "${QEMU_CPU:-cortex-a72}" -plugin "$plugin_arg" "$bin" "$@" >&2 || rc=$?
[[ -s $out ]] || die "plugin wrote no counts (qemu exit status $rc)"
cat "$out"
exit "$rc"
