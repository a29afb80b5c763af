#!/usr/bin/env bash
# The core's native tests (tests/native/test_kernels.cpp): built with the kernel files'
# flags, run natively (every x86-64 path), then cross-built for aarch64 and run under qemu
# as a Cortex-A72 (armv8.0, a Raspberry Pi 4: any newer instruction traps) and a
# Neoverse-N1 (armv8.2, like a Pi 5's Cortex-A76).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/native
mkdir -p "$out"
flags=(-std=c++20 -O3 -ffp-contract=off -Wall -Wextra -Icsrc)
sources=(tests/native/test_kernels.cpp csrc/*.cpp)

echo "-- native ($(uname -m))"
g++ "${flags[@]}" "${sources[@]}" -o "$out/test_kernels"
"$out/test_kernels"

scripts/ensure_apt.sh g++-aarch64-linux-gnu qemu-user
echo "-- aarch64 under qemu"
aarch64-linux-gnu-g++ "${flags[@]}" -march=armv8-a -static "${sources[@]}" -o "$out/test_kernels_aarch64"
for cpu in cortex-a72 neoverse-n1; do
  echo "qemu-aarch64 -cpu $cpu"
  qemu-aarch64 -cpu "$cpu" "$out/test_kernels_aarch64" --quick
done
