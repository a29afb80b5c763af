#!/usr/bin/env bash
# The aarch64 variant end to end on an x86-64 machine: cross-built against the aarch64 torch
# wheel, laid out next to the x86-64 variant in build/, loaded through `kernels` inside an
# emulated aarch64 Python and tested there, down to identical results with x86-64.
#
#   scripts/aarch64_tests.sh env     cross compiler and qemu (apt), emulated Python + torch (cached)
#   scripts/aarch64_tests.sh build   cross-build build/torch<MAJ><MIN>-cxx11-cpu-aarch64-linux
#   scripts/aarch64_tests.sh test    record the x86-64 reference rounds, then the emulated run
#   scripts/aarch64_tests.sh         all three
#
# Environment: PY, the host Python with torch and kernels (default .venv/bin/python, which
# `make setup` creates); SPEC_VERIFY_CACHE, see aarch64_python.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export LOCAL_KERNELS="phanerozoic/spec-verify=$PWD/build"
# The tests check which path is chosen by default, so a forced one must not leak in.
unset SPEC_VERIFY_ISA
if [[ $(uname -m) != x86_64 ]]; then
  # Cross-building and emulating are for x86-64 hosts (CI); elsewhere `make build` and the
  # pytest stage already build and test this machine's own variant natively.
  echo "aarch64_tests.sh: skipped on $(uname -m): it cross-builds and emulates from x86-64"
  exit 0
fi

# What the emulated run covers. One process, because each `import torch` costs ~10 s under
# qemu. Left out: the test that starts subprocesses (an emulated process cannot start
# another without binfmt_misc), test_paths' random rounds (test_cross_arch.py compares both
# paths here with x86-64, on similar rows, in half the time) and the decoder's Python-only
# tests. The law and invariant tests run on the NEON path only: the scalar path is the same
# code x86-64 tests, and test_cross_arch.py shows it reproduces x86-64's results here. The
# error tests of every method and draft form (in_every_mode, unknown_method) check shared
# argument code and run natively; the NEON path's row checks are in the native tests.
TESTS=(
  tests/test_cross_arch.py
  tests/test_greedy.py
  tests/test_errors.py
  tests/test_sampling.py
  tests/test_paths.py
  tests/test_torch_integration.py
  tests/test_law.py::test_joint_law_of_accepted_length_and_token
  tests/test_decoder.py::test_greedy_output_equals_plain_greedy_decoding
)
SELECT='not environment_variable and not paths_agree_on_random_rounds and not (scalar and (invariants or joint_law)) and not in_every_mode and not unknown_method'

# torch 2.10.0's aarch64 wheel needs armv8.1 itself (aarch64_python.sh explains), so torch
# runs on a Neoverse-N1; native_tests.sh runs the kernels' armv8.0 build on a Cortex-A72.
QEMU_CPU_FOR_TORCH=neoverse-n1

env_setup() {
  scripts/ensure_apt.sh g++-aarch64-linux-gnu qemu-user
  scripts/aarch64_python.sh setup
}

build() {
  local key value torch_dir="" py_include=""
  while IFS='=' read -r key value; do
    case $key in
      TORCH_DIR) torch_dir=$value ;;
      PY_INCLUDE) py_include=$value ;;
    esac
  done < <(scripts/aarch64_python.sh path)
  [[ -n $torch_dir && -n $py_include ]] || { echo "aarch64_tests.sh: aarch64_python.sh path gave no TORCH_DIR/PY_INCLUDE" >&2; exit 1; }
  "$PY" scripts/build.py --arch aarch64 --cxx aarch64-linux-gnu-g++ \
    --torch-dir "$torch_dir" --python-include "$py_include"
}

run_tests() {
  # The reference comes from the x86-64 variant built from the same sources, made here
  # rather than taken from an earlier pytest run, so that this stage stands alone.
  echo "-- x86-64: recording the reference rounds (build/cross-arch/)"
  "$PY" -m pytest -q -p no:cacheprovider tests/test_cross_arch.py
  echo "-- aarch64 under qemu ($QEMU_CPU_FOR_TORCH): get_kernel, then the tests"
  # No cache provider: the emulated run must not rewrite the native runs' pytest cache.
  QEMU_CPU=$QEMU_CPU_FOR_TORCH SPEC_VERIFY_REQUIRE_REFERENCE=1 \
    scripts/aarch64_python.sh run -m pytest -q -rs -p no:cacheprovider --durations=5 \
    "${TESTS[@]}" -k "$SELECT"
}

case "${1:-all}" in
  env) env_setup ;;
  build) build ;;
  test) run_tests ;;
  all) env_setup; build; run_tests ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
