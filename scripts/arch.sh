# Which architecture is native here and which one is emulated: sourced by the scripts that
# build and test both (native_tests.sh, emulated_python.sh, emulated_tests.sh, setup_venv.sh,
# variants.sh). One code path for both hosts: an x86-64 host runs x86-64 natively and
# aarch64 under qemu; an aarch64 host (a Raspberry Pi, a Graviton or Ampere runner) runs
# aarch64 natively and x86-64 under qemu.
#
#   NATIVE_ARCH     uname -m: x86_64 or aarch64
#   EMULATED_ARCH   the other one; SPEC_VERIFY_EMULATE=x86_64|aarch64 overrides it, so an
#                   x86-64 host can run the x86-64-under-qemu side an aarch64 host runs
#                   (the emulated environment, cross build and tests), to check it here
#
# Functions take an architecture (x86_64 or aarch64) and print one value.

NATIVE_ARCH=$(uname -m)
case $NATIVE_ARCH in
  x86_64) _sv_other=aarch64 ;;
  aarch64) _sv_other=x86_64 ;;
  *) echo "spec-verify: unsupported host architecture $NATIVE_ARCH (x86_64 and aarch64 are)" >&2; exit 1 ;;
esac
EMULATED_ARCH=${SPEC_VERIFY_EMULATE:-$_sv_other}
case $EMULATED_ARCH in
  x86_64 | aarch64) ;;
  *) echo "spec-verify: SPEC_VERIFY_EMULATE=$EMULATED_ARCH is not x86_64 or aarch64" >&2; exit 1 ;;
esac
unset _sv_other

deb_arch() { case $1 in x86_64) echo amd64 ;; aarch64) echo arm64 ;; esac; }
gnu_triplet() { echo "$1-linux-gnu"; }
qemu_for() { echo "qemu-$1"; }

# The C++ compiler for code that runs on $1, and the Debian package that provides it.
# Debian's native g++ also answers to its triplet name, so both work for the native arch.
cxx_for() { if [[ $1 == "$NATIVE_ARCH" ]]; then echo "${CXX:-g++}"; else echo "$1-linux-gnu-g++"; fi; }
cxx_package_for() { if [[ $1 == "$NATIVE_ARCH" ]]; then echo g++; else echo "g++-${1//_/-}-linux-gnu"; fi; }

# The oldest core each build must run on (scripts/build.py's ARCH_FLAGS say the same).
march_flags() { case $1 in aarch64) echo "-march=armv8-a" ;; x86_64) echo "" ;; esac; }

# The emulated cores the native C++ tests run on, oldest first:
# aarch64: Cortex-A72 (armv8.0, a Raspberry Pi 4) and Neoverse-N1 (armv8.2, like a Pi 5's A76);
# x86_64: qemu64 (SSE2 only: the scalar path is chosen) and max (AVX2 and FMA, which qemu 7.2
# emulates; it has no AVX-512, so that path runs on AVX-512 hardware only).
qemu_cpus_for() { case $1 in aarch64) echo "cortex-a72 neoverse-n1" ;; x86_64) echo "qemu64 max" ;; esac; }
# The core emulated torch runs on (torch 2.10's aarch64 wheel needs armv8.1: emulated_python.sh).
qemu_torch_cpu_for() { case $1 in aarch64) echo neoverse-n1 ;; x86_64) echo max ;; esac; }

# The torch the native virtual environment pins (requirements.txt names the x86-64 one).
# x86-64: 2.13.0, the CPU build. aarch64: PyPI's last CPU-only aarch64 torch is 2.10.0 (its
# 2.11+ aarch64 wheels are CUDA builds of several GB), but 2.10.0 dies with SIGILL at import on
# an ARMv8.0 core (Raspberry Pi 4, Cortex-A72: no LSE atomics, pytorch/pytorch#174344), so
# such a core gets 2.9.1. SPEC_VERIFY_TORCH overrides the choice.
native_torch_version() {
  if [[ -n ${SPEC_VERIFY_TORCH:-} ]]; then echo "$SPEC_VERIFY_TORCH"; return; fi
  case $NATIVE_ARCH in
    x86_64) echo 2.13.0 ;;
    aarch64)
      if grep -qw atomics /proc/cpuinfo 2>/dev/null; then echo 2.10.0; else echo 2.9.1; fi ;;
  esac
}

# Linker flags a static cross build for $1 needs, preparing them in directory $2. Debian's
# libc6-dev-amd64-cross ships libm.a as a linker script that names the native paths
# (/usr/lib/x86_64-linux-gnu/libm-2.36.a and libmvec.a), absent on an aarch64 host: a copy
# of the script naming the cross directory's archives goes first on the search path.
static_libm_fix() {
  local lib="/usr/$1-linux-gnu/lib" dir="$2/libm-$1"
  [[ $1 != "$NATIVE_ARCH" && -f $lib/libm.a ]] || return 0
  [[ $(head -c 7 "$lib/libm.a") == '!<arch>' ]] && return 0
  mkdir -p "$dir"
  sed -E "s#/usr/lib/$1-linux-gnu/#$lib/#g" "$lib/libm.a" >"$dir/libm.a"
  echo "-L$dir"
}
