#!/usr/bin/env bash
# The core's native tests (tests/native/test_*.cpp, one file per rule): built with the kernel files'
# flags and run on this machine (every path its CPU has), then cross-built for the other
# architecture (scripts/arch.sh) and run under qemu on each of its emulated cores:
# aarch64 as a Cortex-A72 (armv8.0, a Raspberry Pi 4: any newer instruction traps) and a
# Neoverse-N1 (armv8.2, like a Pi 5's Cortex-A76); x86-64 as qemu64 (SSE2 only: the
# scalar path) and max (AVX2; qemu 7.2 has no AVX-512).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/arch.sh
out=build/native
mkdir -p "$out"
flags=(-std=c++20 -O3 -ffp-contract=off -Wall -Wextra -Icsrc)
# The kernel's .cpp files as build.toml lists them (what the Hub build compiles).
mapfile -t kernel_sources < <(python3 scripts/build_sources.py kernel-cpp)
[[ ${#kernel_sources[@]} -gt 0 ]] || { echo "native_tests.sh: no sources from build.toml" >&2; exit 1; }
sources=(tests/native/test_*.cpp "${kernel_sources[@]}")

# The other architecture's build goes first, in the background, beside this machine's build
# and run (two cores: the stage takes the longer of the two, not their sum).
arch=$EMULATED_ARCH
if [[ $arch != "$NATIVE_ARCH" ]]; then
  scripts/ensure_apt.sh "$(cxx_package_for "$arch")" qemu-user
else
  scripts/ensure_apt.sh qemu-user
fi
# shellcheck disable=SC2046
"$(cxx_for "$arch")" "${flags[@]}" $(march_flags "$arch") -static $(static_libm_fix "$arch" "$out") \
  "${sources[@]}" -o "$out/test_kernels_$arch" &
cross=$!

echo "-- native ($NATIVE_ARCH)"
# shellcheck disable=SC2046
"$(cxx_for "$NATIVE_ARCH")" "${flags[@]}" $(march_flags "$NATIVE_ARCH") "${sources[@]}" -o "$out/test_kernels"
"$out/test_kernels"

wait "$cross"
# Each emulated core in its own process, side by side, and beside them this machine's quick
# run under UBSan (float-to-int overflow included: GCC's -fsanitize=undefined leaves it
# out), where undefined behaviour in any path (the scalar reference most of all) stops the
# run; their outputs in order afterwards.
echo "-- $arch under qemu, and $NATIVE_ARCH under UBSan"
pids=()
for cpu in $(qemu_cpus_for "$arch"); do
  "$(qemu_for "$arch")" -cpu "$cpu" "$out/test_kernels_$arch" --quick > "$out/emulated_$cpu.log" 2>&1 &
  pids+=($!)
done
(
  # shellcheck disable=SC2046
  "$(cxx_for "$NATIVE_ARCH")" "${flags[@]/-O3/-O1}" $(march_flags "$NATIVE_ARCH") \
    -Wno-psabi -fsanitize=undefined,float-cast-overflow -fno-sanitize-recover=all "${sources[@]}" -o "$out/test_kernels_ubsan" &&
    "$out/test_kernels_ubsan" --quick
) > "$out/ubsan.log" 2>&1 &
pids+=($!)
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for cpu in $(qemu_cpus_for "$arch"); do
  echo "$(qemu_for "$arch") -cpu $cpu"
  cat "$out/emulated_$cpu.log"
done
echo "$NATIVE_ARCH under UBSan (-O1, quick)"
cat "$out/ubsan.log"
exit "$status"
