#!/usr/bin/env bash
# The release variants on x86-64 and aarch64, each built by scripts/build.py against a torch
# wheel from PyPI: torch212-cxx11-cpu-<arch>-linux (versioned/,
# for torch 2.12 only) and torch-stable-abi213-cpu-<arch>-linux
# (torch-ext/stable/, for torch 2.13 and every later torch).
#
#   scripts/variants.sh build   fetch each wheel (pip download --no-deps, cached), unpack its
#                               headers and libraries, build the variant into build/
#   scripts/variants.sh test    every x86-64 variant under each torch x kernels pair below, each
#                               in its own venv (cached): the README's usage line as written
#                               (scripts/readme_usage.py) loads the variant expected with no
#                               warning, and tests/test_release.py holds every variant's
#                               metadata digest to kernels' own hash; then, once per torch,
#                               the op-level tests pass and test_cross_arch.py's rounds equal,
#                               bit for bit, those recorded first under this machine's torch
#                               2.13 with the stable variant of `make build`; and the demo
#                               (examples/demo.py) runs as written under torch 2.15
#   scripts/variants.sh venvs   only make (or check) the cached venvs
#   scripts/variants.sh pythons print the python of each pair whose venv is made, making none
#   scripts/variants.sh         build, then test
#
# The pairs: torch 2.12.1 (the torch212 variant), the host's torch 2.13.0 (requirements.txt's
# CPU build), 2.14.1 and 2.15.0 (PyPI's CUDA builds; no GPU is used), each under kernels
# 0.17.2 and 0.19.1 (the stable variant on 2.13 and later). kernels 0.19 verifies each
# variant's files against its metadata digest at every load (scripts/variant_digest.py).
#
# x86-64's stable variant is `make build`'s (against the installed torch 2.13.0, the CPU
# wheel) and runs every test in `make pytest`; aarch64 is tested under emulation with torch
# 2.10 and its own torch210 variant (`make emulated`). The aarch64 wheels of torch 2.12 and
# 2.13 on PyPI are CUDA builds that need NVIDIA's libraries to import, which an emulated run
# here cannot afford: those two variants are built, and `make abi` / `make hub` check their
# ELF, ABI, exports, metadata and digest (tests/test_release.py too, with kernels' own hash).
#
# Environment: PY (default .venv/bin/python) runs build.py; SPEC_VERIFY_CACHE (default
# ~/.cache/spec-verify) holds the wheels, the unpacked torch trees and the test venvs: one
# per torch (about 5.5 GB each: PyPI's x86-64 torch is the CUDA build, with its NVIDIA
# libraries), and for the other kernels release a small venv on top of it (a .pth file
# reaches the torch venv's packages; its own kernels comes first on sys.path).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) fails the assignment
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CACHE="${SPEC_VERIFY_CACHE:-$HOME/.cache/spec-verify}/variants"
# version arch: what is built here (x86-64's stable variant comes from `make build`); build.py
# builds the stable binding against torch 2.13 and later, the versioned one against 2.12.
VARIANTS=("2.12.1 x86_64" "2.12.1 aarch64" "2.13.0 aarch64")
# "torch kernels": the venv of each torch the x86-64 variants are tested under, with the
# kernels release pip installs beside it (PyPI's newest where the pair is today's), and
# what else it needs. PIP_CONSTRAINT=/dev/null: this machine's pip caps torch at 2.14.1
# (/etc/xdg/pip), for that one pip command only.
TORCH_VENVS=("2.12.1 0.17.2" "2.14.1 0.17.2" "2.15.0 0.19.1")
VENV_SPECS=(numpy pytest)
# The kernels releases every torch is tried with: the pinned one and PyPI's newest.
KERNELS=(0.17.2 0.19.1)
# Op-level tests: every op (chains, half rows, one-hot and block, trees, batches), its errors,
# the uniforms drawn for it, paths,
# laws, opcheck and torch.compile. Left out: the decoder's, prompt lookup's and warping's
# Python-level tests (the same Python under any torch) and those that need transformers.
TEST_FILES=(tests/test_greedy.py tests/test_errors.py tests/test_logits_errors.py tests/test_sampling.py
            tests/test_paths.py tests/test_torch_integration.py tests/test_law.py tests/test_half_rows.py
            tests/test_logits_law.py tests/test_one_hot_block_law.py tests/test_tree.py tests/test_uniforms.py
            tests/test_batch.py tests/test_shared_generators.py)
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

# The torch $1 venv with kernels $2 (cached), made with pip from PyPI; prints its python.
torch_venv() {
  local torch=$1 kernels=$2 venv="$CACHE/venv-torch$1" stamp
  stamp="torch==$torch kernels==$kernels ${VENV_SPECS[*]}"
  if [[ ! -f "$venv/.complete" || "$(cat "$venv/.complete")" != "$stamp" ]]; then
    [[ -z ${ONLY_EXISTING:-} ]] || return 1
    # PyPI's x86-64 torch is the CUDA build: pip brings its NVIDIA libraries (about 4 GB),
    # without which it does not import. No GPU is used.
    log "setting up $venv (torch $torch from PyPI, with its CUDA libraries; kernels $kernels)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    PIP_CONSTRAINT=/dev/null nice -n 10 "$venv/bin/pip" install -q --no-cache-dir \
      "torch==$torch" "kernels==$kernels" "${VENV_SPECS[@]}" 2>&1 |
      grep -v 'is ignored: it is neither a file nor a directory' >&2 || true
    "$venv/bin/python" -c "import torch, kernels, numpy, pytest" || die "the torch $torch venv does not work"
    echo "$stamp" >"$venv/.complete"
  fi
  echo "$venv/bin/python"
}

# $1 (a python) with kernels $2 in front: $1 itself when it has that release, else a small
# venv (cached) whose site-packages holds kernels[benchmark] $2 (and what it needs that $1's
# venv lacks) and a .pth file that appends $1's site-packages, torch and all. Prints its python.
with_kernels() {
  local base=$1 kernels=$2 name site overlay stamp
  [[ "$("$base" -c 'import kernels; print(kernels.__version__)')" == "$kernels" ]] && { echo "$base"; return; }
  base=$(cd "$(dirname "$base")" && pwd)/$(basename "$base")  # absolute, not resolved: a venv's python is a link
  site=$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  name=$("$base" -c 'import torch; print(torch.__version__.split("+")[0])')
  overlay="$CACHE/venv-torch$name-kernels$kernels"
  stamp="$site kernels[benchmark]==$kernels"
  if [[ ! -f "$overlay/.complete" || "$(cat "$overlay/.complete")" != "$stamp" ]] ||
     ! "$overlay/bin/python" -c "import torch, kernels" 2>/dev/null; then
    [[ -z ${ONLY_EXISTING:-} ]] || return 1
    log "setting up $overlay (kernels $kernels over $site)"
    rm -rf "$overlay"
    python3 -m venv "$overlay"
    echo "$site" >"$("$overlay/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-torch-venv.pth"
    PIP_CONSTRAINT=/dev/null nice -n 10 "$overlay/bin/pip" install -q "kernels[benchmark]==$kernels" 2>&1 |
      grep -v 'is ignored: it is neither a file nor a directory' >&2 || true
    [[ "$("$overlay/bin/python" -c 'import torch, kernels; print(kernels.__version__)')" == "$kernels" ]] ||
      die "$overlay does not import torch with kernels $kernels"
    echo "$stamp" >"$overlay/.complete"
  fi
  echo "$overlay/bin/python"
}

# The python of every torch x kernels pair, one per line, made if missing; with ONLY_EXISTING
# set, those already made and up to date only (`make hub` loads its folder under each).
pairs() {
  local t torch kernels python k p
  for t in "${TORCH_VENVS[@]}"; do
    read -r torch kernels <<<"$t"
    python=$(torch_venv "$torch" "$kernels") || continue
    for k in "${KERNELS[@]}"; do p=$(with_kernels "$python" "$k") || continue; echo "$p"; done
  done
  for k in "${KERNELS[@]}"; do p=$(with_kernels "$PY" "$k") || continue; echo "$p"; done
}

venvs() {
  [[ $(uname -m) == x86_64 ]] || { log "skipped: the test venvs are for x86-64 hosts"; return 0; }
  pairs >/dev/null
}

test_x86() {
  [[ $(uname -m) == x86_64 ]] || { log "skipped: the test venvs are for x86-64 hosts"; return 0; }
  # The reference rounds: this machine's torch 2.13 and `make build`'s stable variant.
  log "recording the reference rounds under $("$PY" -c 'import torch; print(torch.__version__)') (build/cross-arch/)"
  "$PY" -m pytest -q -p no:cacheprovider tests/test_cross_arch.py
  local t torch kernels python pythons summary=() line
  # Once per torch, under its venv's own kernels: the ops, bit for bit.
  for t in "${TORCH_VENVS[@]}"; do
    read -r torch kernels <<<"$t"
    python=$(torch_venv "$torch" "$kernels")
    log "op-level tests under torch $torch (kernels $kernels), and the rounds against the record"
    SPEC_VERIFY_REQUIRE_REFERENCE=1 "$python" -m pytest -q -p no:cacheprovider "${TEST_FILES[@]}" tests/test_cross_arch.py
  done
  log "examples/demo.py as written under torch ${TORCH_VENVS[-1]% *}"
  nice -n 10 "$python" examples/demo.py >/dev/null
  # Every pair: the README's usage line and the digests.
  pythons=$(pairs)
  mapfile -t pythons <<<"$pythons"
  for python in "${pythons[@]}"; do
    line=$("$python" scripts/readme_usage.py --check) || die "the README's usage line under $python: see above"
    summary+=("$line")
    log "$line"
    # The digests, and kernels' choice among the Hub folder's variants (test_stable_abi.py).
    "$python" -m pytest -q -p no:cacheprovider tests/test_release.py tests/test_stable_abi.py \
      --deselect tests/test_release.py::test_readme_usage_line_as_written
  done
  python=$(with_kernels "$PY" "${KERNELS[-1]}")
  log "kernels benchmark ./ under kernels ${KERNELS[-1]} (scripts/kernels_bench.py --check)"
  nice -n 10 "$python" scripts/kernels_bench.py --check >/dev/null
  log "the README's usage line under each torch x kernels (variant chosen, warnings):"
  printf '%s\n' "${summary[@]}" | "$PY" -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("  torch %-13s %-10s kernels %-7s %s, %s" % (r["torch"], "(CUDA)" if r["cuda_build"] else "(CPU)",
          r["kernels"], r["variant"], "; ".join(r["warnings"]) or "no warning"))' >&2
}

case "${1:-all}" in
  build) build ;;
  venvs) venvs ;;
  pythons) [[ $(uname -m) != x86_64 ]] || ONLY_EXISTING=1 pairs ;;
  test) test_x86 ;;
  all) build; test_x86 ;;
  *) sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
