#!/usr/bin/env bash
# llama-cpp-python and gguf for spec_verify.llama_cpp's tests, demo run and benchmark, kept
# outside the project's venv in a cached folder that goes on PYTHONPATH.
#
#   scripts/llama_env.sh setup   build and install if missing (cached, idempotent)
#   scripts/llama_env.sh site    print the folder to put on PYTHONPATH (empty if not set up)
#
# llama-cpp-python is built from PyPI's source package (it vendors llama.cpp): 5 to 14
# minutes on 2 cores, once. The wheel is kept, so a lost site folder reinstalls in seconds.
# The build is CPU-only, for this CPU's instruction sets (AMX excepted: see isa_args),
# without llama.cpp's tools, examples, tests, server or curl, niced, on at most 2 jobs
# (CMAKE_BUILD_PARALLEL_LEVEL).
# The cache is keyed on the versions, the Python and this CPU's flags, so a machine with
# another CPU builds its own instead of loading code for instructions it lacks.
#
# Environment: PY, the project's Python (default .venv/bin/python; its numpy is shared);
# SPEC_VERIFY_CACHE, the cache root (default ~/.cache/spec-verify), of which we use llama/;
# LLAMA_BUILD_JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

# ---- pinned inputs: changing any of these changes the key and forces a rebuild ----
LLAMA_CPP_PYTHON=0.3.36
GGUF=0.19.0
# Pure-Python dependencies, installed next to them without theirs (numpy, typing-extensions,
# jinja2 come from the project's venv). diskcache: llama-cpp-python's import needs it;
# pyyaml, tqdm, requests: gguf's.
PURE=(diskcache==5.6.3 pyyaml==6.0.3 tqdm==4.67.1)
CMAKE_ARGS_PINNED="-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
-DGGML_BLAS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAVA_BUILD=OFF"
LAYOUT_VERSION=2

# This CPU's instruction sets, named one by one rather than by GGML_NATIVE (-march=native),
# because native would also turn on AMX: on this workplace's Xeons (amx_int8 in cpuinfo)
# llama.cpp's AMX matrix multiply segfaults on any quantized model (seen: Q8_0 and Q4_0,
# in ggml_backend_amx_mul_mat). Elsewhere than x86-64, native is fine.
isa_args() {
  if [[ $(uname -m) != x86_64 ]]; then
    printf '%s' "-DGGML_NATIVE=ON"
    return
  fi
  local flags out="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" pair
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for pair in sse4_2:SSE42 avx:AVX avx_vnni:AVX_VNNI avx2:AVX2 bmi2:BMI2 fma:FMA f16c:F16C \
      avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    if [[ $flags == *" ${pair%%:*} "* ]]; then
      out+=" -DGGML_${pair#*:}=ON"
    else
      out+=" -DGGML_${pair#*:}=OFF"
    fi
  done
  printf '%s' "$out"
}
CMAKE_ARGS_PINNED="$CMAKE_ARGS_PINNED $(isa_args)"

CACHE="${SPEC_VERIFY_CACHE:-$HOME/.cache/spec-verify}/llama"
log() { printf '[llama_env] %s\n' "$*" >&2; }
die() { printf 'llama_env.sh: ERROR: %s\n' "$*" >&2; exit 1; }

key() {
  local pyver flags
  pyver=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)
  printf '%s-%s' "$pyver" "$(printf '%s|%s|%s|%s|%s' "$LLAMA_CPP_PYTHON" "$GGUF" "${PURE[*]}" \
    "$CMAKE_ARGS_PINNED$LAYOUT_VERSION" "$flags" | sha256sum | cut -c1-12)"
}

site_dir() { printf '%s/site-%s' "$CACHE" "$(key)"; }

setup() {
  local site wheels stamp
  site=$(site_dir)
  stamp="$site.stamp"
  if [[ -f $stamp ]]; then
    log "cached: $site"
    return 0
  fi
  wheels="$CACHE/wheels-$(key)"
  mkdir -p "$wheels"
  if ! ls "$wheels"/llama_cpp_python-"$LLAMA_CPP_PYTHON"-*.whl >/dev/null 2>&1; then
    # --no-cache-dir: pip's own wheel cache keys a built wheel by the source package alone, so
    # it would hand back a wheel built with other CMAKE_ARGS.
    log "building llama-cpp-python $LLAMA_CPP_PYTHON from source (5-14 minutes on 2 cores)"
    local t0=$SECONDS buildlog="$CACHE/build-$(key).log"
    if ! CMAKE_ARGS="$CMAKE_ARGS_PINNED" CMAKE_BUILD_PARALLEL_LEVEL="${LLAMA_BUILD_JOBS:-2}" \
        nice -n 10 "$PY" -m pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
        --disable-pip-version-check -w "$wheels" "llama-cpp-python==$LLAMA_CPP_PYTHON" \
        >"$buildlog" 2>&1; then
      tail -n 60 "$buildlog" >&2
      die "building llama-cpp-python failed (whole log: $buildlog)"
    fi
    log "built in $((SECONDS - t0)) s"
  fi
  rm -rf "$site"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$site" \
    "$wheels"/llama_cpp_python-"$LLAMA_CPP_PYTHON"-*.whl "gguf==$GGUF" "${PURE[@]}" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  # The check that matters: llama.cpp loads and gguf imports with the project's torch/numpy.
  PYTHONPATH="$site" "$PY" -c '
import llama_cpp, gguf, numpy, torch
print("[llama_env] llama_cpp", llama_cpp.__version__, "gguf ok, numpy", numpy.__version__)'
  touch "$stamp"
}

case "${1:-setup}" in
  setup) setup ;;
  site) s=$(site_dir); [[ -f $s.stamp ]] && printf '%s\n' "$s" || true ;;
  *) die "usage: $0 setup|site" ;;
esac
