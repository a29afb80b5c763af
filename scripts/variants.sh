#!/usr/bin/env bash
# The release variants on x86-64 and aarch64, each built by scripts/build.py against a torch
# wheel from PyPI: torch212-cxx11-cpu-<arch>-linux (versioned/,
# for torch 2.12 only) and torch-stable-abi213-cpu-<arch>-linux
# (torch-ext/stable/, for torch 2.13 and every later torch).
#
#   scripts/variants.sh build   fetch each wheel (pip download --no-deps, cached), unpack its
#                               headers and libraries, build the variant into build/
#   scripts/variants.sh test    under torch 2.12.1 and under torch 2.14.1, each in its own venv
#                               (cached): get_kernel loads the variant expected (torch212, the
#                               stable one), the op-level tests pass, and test_cross_arch.py's
#                               rounds equal, bit for bit, those recorded first under this
#                               machine's torch 2.13 with the stable variant of `make build`
#   scripts/variants.sh         both
#
# x86-64's stable variant is `make build`'s (against the installed torch 2.13.0, the CPU
# wheel) and runs every test in `make pytest`; aarch64 is tested under emulation with torch
# 2.10 and its own torch210 variant (`make emulated`). The aarch64 wheels of torch 2.12 and
# 2.13 on PyPI are CUDA builds that need NVIDIA's libraries to import, which an emulated run
# here cannot afford: those two variants are built, and `make abi` / `make hub` check their
# ELF, ABI, exports and metadata.
#
# Environment: PY (default .venv/bin/python) runs build.py; SPEC_VERIFY_CACHE (default
# ~/.cache/spec-verify) holds the wheels, the unpacked torch trees and the test venvs (each
# about 5.5 GB: PyPI's x86-64 torch is the CUDA build, with its NVIDIA libraries).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CACHE="${SPEC_VERIFY_CACHE:-$HOME/.cache/spec-verify}/variants"
# version arch: what is built here (x86-64's stable variant comes from `make build`); build.py
# builds the stable binding against torch 2.13 and later, the versioned one against 2.12.
VARIANTS=("2.12.1 x86_64" "2.12.1 aarch64" "2.13.0 aarch64")
# "torch variant": each torch the x86-64 variants are tested under and the variant get_kernel
# must choose there; and what each venv needs besides torch.
TESTS=("2.12.1 torch212-cxx11-cpu-x86_64-linux" "2.14.1 torch-stable-abi213-cpu-x86_64-linux")
TEST_SPECS=(kernels==0.17.2 numpy pytest)
# Op-level tests: every op (chains, half rows, one-hot and block, trees), its errors, paths,
# laws, opcheck and torch.compile. Left out: the decoder's, prompt lookup's and warping's
# Python-level tests (the same Python under any torch) and those that need transformers.
TEST_FILES=(tests/test_greedy.py tests/test_errors.py tests/test_logits_errors.py tests/test_sampling.py
            tests/test_paths.py tests/test_torch_integration.py tests/test_law.py tests/test_half_rows.py
            tests/test_logits_law.py tests/test_one_hot_block_law.py tests/test_tree.py)
export LOCAL_KERNELS="phanerozoic/spec-verify=$PWD/build"
unset SPEC_VERIFY_ISA

T0=$(date +%s)
log() { printf '[variants %4ss] %s\n' "$(($(date +%s) - T0))" "$*" >&2; }
die() { printf 'variants.sh: ERROR: %s\n' "$*" >&2; exit 1; }

platform_args() {  # $1 arch
  echo "--platform manylinux_2_28_$1 --python-version 3.11 --implementation cp --abi cp311 --only-binary=:all:"
}

# Unpacks torch/include, torch/lib and torch/version.py of the wheel of torch $1 for arch $2
# into $CACHE/torch-$1-$2/torch (what build.py --torch-dir needs) and prints that directory.
torch_tree() {
  local version=$1 arch=$2 dest="$CACHE/torch-$1-$2" wheels="$CACHE/wheels"
  if [[ ! -f "$dest/.complete" ]]; then
    mkdir -p "$wheels"
    local whl; whl=$(ls "$wheels"/torch-"$version"-*_"$arch".whl 2>/dev/null | head -n1 || true)
    if [[ -z $whl ]]; then
      log "pip download --no-deps torch==$version ($arch)"
      # shellcheck disable=SC2046
      python3 -m pip download -q --no-deps --no-cache-dir --dest "$wheels" $(platform_args "$arch") \
        "torch==$version" 2>&1 | grep -v 'is ignored: it is neither a file nor a directory' >&2 || true
      whl=$(ls "$wheels"/torch-"$version"-*_"$arch".whl 2>/dev/null | head -n1 || true)
      [[ -n $whl ]] || die "no torch $version wheel for $arch"
    fi
    log "unpacking headers and libraries of ${whl##*/}"
    rm -rf "$dest"; mkdir -p "$dest"
    python3 - "$whl" "$dest" <<'EOF'
import sys, zipfile
whl, dest = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist()
             if n.startswith(("torch/include/", "torch/lib/")) or n == "torch/version.py"]
    z.extractall(dest, names)
EOF
    touch "$dest/.complete"
  fi
  echo "$dest/torch"
}

aarch64_py_include() {
  local key value
  while IFS='=' read -r key value; do
    [[ $key == PY_INCLUDE ]] && { echo "$value"; return; }
  done < <(scripts/emulated_python.sh aarch64 path)
}

build() {
  local v version arch torch_dir
  # Cross-building needs the x86-64 host's emulated aarch64 Python sysroot (emulated_python.sh).
  [[ $(uname -m) == x86_64 ]] || { log "skipped on $(uname -m): the variants are built from x86-64"; return 0; }
  for v in "${VARIANTS[@]}"; do
    read -r version arch <<<"$v"
    torch_dir=$(torch_tree "$version" "$arch")
    if [[ $arch == "$(uname -m)" ]]; then
      nice -n 10 "$PY" scripts/build.py --torch-dir "$torch_dir"
    else
      scripts/ensure_apt.sh "g++-$arch-linux-gnu"
      nice -n 10 "$PY" scripts/build.py --arch "$arch" --cxx "$arch-linux-gnu-g++" --torch-dir "$torch_dir" \
        --python-include "$(aarch64_py_include)"
    fi
  done
}

# The torch $1 venv (cached), made with pip from PyPI; prints its python.
test_venv() {
  local torch=$1 venv="$CACHE/venv-torch$1" stamp
  stamp="torch==$torch ${TEST_SPECS[*]}"
  if [[ ! -f "$venv/.complete" || "$(cat "$venv/.complete")" != "$stamp" ]]; then
    # PyPI's x86-64 torch is the CUDA build: pip brings its NVIDIA libraries (about 4 GB),
    # without which it does not import. No GPU is used.
    log "setting up $venv (torch $torch from PyPI, with its CUDA libraries)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --no-cache-dir "torch==$torch" "${TEST_SPECS[@]}" 2>&1 |
      grep -v 'is ignored: it is neither a file nor a directory' >&2 || true
    "$venv/bin/python" -c "import torch, kernels, numpy, pytest" || die "the torch $torch venv does not work"
    echo "$stamp" >"$venv/.complete"
  fi
  echo "$venv/bin/python"
}

test_x86() {
  [[ $(uname -m) == x86_64 ]] || { log "skipped: the test venvs are for x86-64 hosts"; return 0; }
  # The reference rounds: this machine's torch 2.13 and `make build`'s stable variant.
  log "recording the reference rounds under $("$PY" -c 'import torch; print(torch.__version__)') (build/cross-arch/)"
  "$PY" -m pytest -q -p no:cacheprovider tests/test_cross_arch.py
  local t torch variant python
  for t in "${TESTS[@]}"; do
    read -r torch variant <<<"$t"
    python=$(test_venv "$torch")
    test_one "$torch" "$variant" "$python"
  done
}

test_one() {  # torch variant python
  local torch=$1 variant=$2 python=$3
  log "get_kernel under torch $torch"
  "$python" - "$variant" <<'EOF'
import sys, torch
from kernels import get_kernel
# A CUDA build of torch: kernels picks a CPU variant only with backend="cpu".
sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True, backend="cpu")
where = sys.modules[sv.__name__].__file__
assert f"/{sys.argv[1]}/" in where, f"get_kernel loaded {where}, not the {sys.argv[1]} variant"
print(f"torch {torch.__version__}: get_kernel(..., backend='cpu') loaded {sys.argv[1]}, paths {sv.available_isas()}")
EOF
  log "op-level tests under torch $torch, and the rounds against the record"
  SPEC_VERIFY_REQUIRE_REFERENCE=1 "$python" -m pytest -q -p no:cacheprovider "${TEST_FILES[@]}" tests/test_cross_arch.py
}

case "${1:-all}" in
  build) build ;;
  test) test_x86 ;;
  all) build; test_x86 ;;
  *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
