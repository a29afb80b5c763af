#!/usr/bin/env bash
# An emulated CPython 3.11 + torch (CPU build) for the architecture this host does not run
# natively: aarch64 on an x86-64 host, x86-64 on an aarch64 host (scripts/arch.sh).
#
#   scripts/emulated_python.sh ARCH setup        build the environment if missing (cached, idempotent)
#   scripts/emulated_python.sh ARCH run ARGS...  run the emulated python3.11 with ARGS
#   scripts/emulated_python.sh ARCH path         print SYSROOT= SITE= TORCH_DIR= PYTHON= TORCH_VERSION=
#                                                TORCH_ARMV80= PY_INCLUDE= lines (KEY=VALUE, one per line)
#                                                PY_INCLUDE: the target's Python.h/pyconfig.h, for cross builds
# ARCH is aarch64 or x86_64. The environment is a Debian 12 sysroot of that architecture
# (python3.11 and the libraries it needs, from a private apt universe: the host's dpkg and
# apt state are never touched), torch and its Python dependencies installed with pip for
# that platform, and qemu-user to run it.
#
# Environment:
#   QEMU_CPU              emulated core for `run`. aarch64: default cortex-a72 = armv8.0, Pi 4;
#                         neoverse-n1 = armv8.2 with dotprod/fp16, like a Pi 5's A76.
#                         x86_64: default max (AVX2, FMA; qemu 7.2 has no AVX-512)
#   SPEC_VERIFY_CACHE     cache root (default ~/.cache/spec-verify); we use its ARCH/ part
#   SPEC_VERIFY_AARCH64_TORCH  aarch64 torch version (default 2.10.0); each gets its own site dir
#   SPEC_VERIFY_X86_64_TORCH   x86-64 torch version (default 2.13.0, as the x86-64 venv)
#   AARCH64_PYTHONPATH    extra entries for the emulated sys.path (the host's PYTHONPATH is
#                         deliberately not passed on: it points at the host's packages)
#
# Known limit (aarch64): torch 2.10.0's aarch64 wheel cannot be imported on an ARMv8.0 core
# such as cortex-a72 (SIGILL at dlopen: its libc10.so bundles a mimalloc built with ARMv8.1
# LSE atomics that runs from an ELF constructor; upstream pytorch/pytorch#174344, fixed in
# 2.11, whose aarch64 PyPI wheels are CUDA builds). Python and numpy still work there.
# torch 2.9.1 (SPEC_VERIFY_AARCH64_TORCH=2.9.1) imports on both cores. `path` reports the
# outcome as TORCH_ARMV80=yes|no.
#
# x86-64 torch: where pip finds a CPU build (this project's x86-64 machines keep 2.13.0+cpu
# on disk) that is what goes in; PyPI's own x86-64 wheels are CUDA builds, which import only
# with NVIDIA's libraries (about 3 GB, no GPU needed): the dependencies torch's metadata
# names for x86-64 Linux are installed with it, whatever they are.
#
# Without binfmt_misc every emulated program must be started through qemu explicitly; an
# emulated process cannot spawn another emulated process (subprocess of sys.executable,
# multiprocessing "spawn"). Keep emulated tests in one process.
set -euo pipefail

ARCH=${1:-}
case $ARCH in
  aarch64 | x86_64) shift ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
. "$(dirname "${BASH_SOURCE[0]}")/arch.sh"
DEB_ARCH=$(deb_arch "$ARCH")
QEMU=$(qemu_for "$ARCH")

# ---- pinned inputs: changing any of these changes the stamp and forces a rebuild ----
if [[ $ARCH == aarch64 ]]; then
  # 2.10.0 is the last CPU-only aarch64 torch on PyPI; 2.11+ aarch64 wheels are CUDA builds.
  TORCH_VERSION="${SPEC_VERIFY_AARCH64_TORCH:-2.10.0}"
  : "${QEMU_CPU:=cortex-a72}"
  VERIFY_CPUS=(cortex-a72 neoverse-n1)
else
  TORCH_VERSION="${SPEC_VERIFY_X86_64_TORCH:-2.13.0}"
  : "${QEMU_CPU:=max}"
  VERIFY_CPUS=(max)
fi
TORCH_SPEC="torch==$TORCH_VERSION"
# torch's own Requires-Dist carries x86-64-only CUDA markers that pip would evaluate for the
# host, so torch goes in with --no-deps and its pure-Python deps are named here instead.
# Pinned so that two machines building the cache get the same environment.
PY_SPECS=(
  filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1
  jinja2==3.1.6 MarkupSafe==3.0.4 fsspec==2026.9.0 numpy==2.4.6
  pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 pygments==2.21.0
)
KERNELS_SPEC="kernels==0.17.2"  # optional: setup still succeeds if it cannot be installed
# Only what python3.11 needs at run time, plus libstdc++6 which torch's .so files link to.
DEB_ROOTS=(python3.11 libstdc++6)
# Unpacked for their headers only, without their dependencies: a cross build of the torch
# extension needs the target's pyconfig.h (the host's describes another architecture).
DEB_HEADERS=(libpython3.11-dev)
# Maintainer-script machinery that dependency chains drag in but a sysroot never runs;
# marked "installed" in the private dpkg status so apt neither fetches nor recurses into them.
DEB_PRETEND_INSTALLED=(dpkg tar debconf perl-base install-info)
DEBIAN_MIRROR="http://deb.debian.org/debian"
DEBIAN_SECURITY="http://deb.debian.org/debian-security"
LAYOUT_VERSION=1  # bump when the way the sysroot/site are assembled changes

# Every manylinux tag glibc 2.36 (Debian 12) accepts down to 2_17: NVIDIA's x86-64 wheels,
# for one, are tagged manylinux_2_18 only.
PLATFORM_ARGS=()
for _glibc in 28 27 26 25 24 23 22 21 20 19 18 17; do PLATFORM_ARGS+=(--platform "manylinux_2_${_glibc}_$ARCH"); done
PLATFORM_ARGS+=(--platform "manylinux2014_$ARCH"
  --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
  --only-binary=:all:)

CACHE="${SPEC_VERIFY_CACHE:-$HOME/.cache/spec-verify}/$ARCH"
SYSROOT="$CACHE/sysroot"
SITE="$CACHE/site-torch$TORCH_VERSION"
TORCH_DIR="$SITE/torch"
PYTHON="$SYSROOT/usr/bin/python3.11"
PY_INCLUDE="$SYSROOT/usr/include/python3.11"
# Two stamps, each written only after its part succeeded: an interrupted site build does
# not redo the sysroot, and the site stamp also means "verified under emulation".
SYSROOT_STAMP="$CACHE/sysroot.stamp"
SITE_STAMP="$SITE.stamp"
APTDIR="$CACHE/apt"
DEBS="$CACHE/debs"
WHEELS="$CACHE/wheels"
HOST_PYTHON="${HOST_PYTHON:-python3}"
T0=$(date +%s)
log() { printf '[%s %4ss] %s\n' "$ARCH" "$(($(date +%s) - T0))" "$*" >&2; }
die() { printf 'emulated_python.sh: ERROR: %s\n' "$*" >&2; exit 1; }
human() { numfmt --to=iec --suffix=B "$1"; }

sysroot_fingerprint() {
  printf '%s\n' "$LAYOUT_VERSION" "${DEB_ROOTS[@]}" "${DEB_PRETEND_INSTALLED[@]}" \
    "$DEBIAN_MIRROR" "$DEBIAN_SECURITY" "headers:" "${DEB_HEADERS[@]}" | sha256sum | cut -d' ' -f1
}
site_fingerprint() {
  printf '%s\n' "$LAYOUT_VERSION" "$TORCH_SPEC" "${PY_SPECS[@]}" "$KERNELS_SPEC" |
    sha256sum | cut -d' ' -f1
}
stamp_ok() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }
sysroot_ready() {
  stamp_ok "$SYSROOT_STAMP" "$(sysroot_fingerprint)" && [[ -x "$PYTHON" && -f "$PY_INCLUDE/pyconfig.h" ]]
}
is_ready() {
  sysroot_ready && stamp_ok "$SITE_STAMP" "$(site_fingerprint)" \
    && [[ -f "$TORCH_DIR/__init__.py" ]] && command -v "$QEMU" >/dev/null
}

ensure_qemu() {
  command -v "$QEMU" >/dev/null && return
  [[ $(id -u) == 0 ]] || die "$QEMU missing; run as root or: apt-get install qemu-user"
  "$(dirname "${BASH_SOURCE[0]}")/ensure_apt.sh" qemu-user >&2 || die "could not install qemu-user"
  command -v "$QEMU" >/dev/null || die "qemu-user installed but $QEMU not on PATH"
}

# A private apt universe for the target: own config, sources, lists, cache and an (almost)
# empty dpkg status, so the host's dpkg database and apt state are never read or written.
write_apt_config() {
  mkdir -p "$APTDIR"/{etc/apt.conf.d,etc/preferences.d,etc/sources.list.d,state/lists/partial,cache/archives/partial}
  local kr=/usr/share/keyrings/debian-archive-keyring.gpg
  [[ -f $kr ]] || die "$kr missing (package debian-archive-keyring)"
  cat >"$APTDIR/etc/sources.list" <<EOF
deb [arch=$DEB_ARCH signed-by=$kr] $DEBIAN_MIRROR bookworm main
deb [arch=$DEB_ARCH signed-by=$kr] $DEBIAN_MIRROR bookworm-updates main
deb [arch=$DEB_ARCH signed-by=$kr] $DEBIAN_SECURITY bookworm-security main
EOF
  # Dir::Etc::Parts is redirected too, so the host's apt.conf.d (docker-clean hooks etc.)
  # does not apply. Sandbox user root: _apt cannot enter /root, where the cache usually is.
  # Valid-Until is off because the mirror this machine sees may be a dated snapshot.
  cat >"$APTDIR/apt.conf" <<EOF
APT::Architecture "$DEB_ARCH";
APT::Architectures { "$DEB_ARCH"; };
APT::Sandbox::User "root";
APT::Install-Recommends "false";
Dir::State "$APTDIR/state";
Dir::State::status "$APTDIR/state/status";
Dir::Cache "$APTDIR/cache";
Dir::Etc "$APTDIR/etc";
Dir::Etc::SourceList "$APTDIR/etc/sources.list";
Dir::Etc::SourceParts "$APTDIR/etc/sources.list.d";
Dir::Etc::Parts "$APTDIR/etc/apt.conf.d";
Dir::Etc::Preferences "$APTDIR/etc/preferences";
Dir::Etc::PreferencesParts "$APTDIR/etc/preferences.d";
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
EOF
  : >"$APTDIR/state/status"
  local p
  for p in "${DEB_PRETEND_INSTALLED[@]}"; do
    printf 'Package: %s\nStatus: install ok installed\nVersion: 999\nArchitecture: %s\nMaintainer: none\nDescription: not needed in an emulation sysroot\n\n' "$p" "$DEB_ARCH" >>"$APTDIR/state/status"
  done
}

build_sysroot() {
  export APT_CONFIG="$APTDIR/apt.conf"
  write_apt_config
  log "apt-get update (private $DEB_ARCH lists)"
  apt-get update -q >"$APTDIR/update.log" 2>&1 || { cat "$APTDIR/update.log" >&2; die "apt-get update ($DEB_ARCH) failed"; }

  # Let apt's real solver compute the closure (it picks one provider for virtual
  # packages and honours alternatives) and just print what it would fetch.
  local uris="$APTDIR/closure.txt"
  apt-get install -qq --print-uris -y "${DEB_ROOTS[@]}" >"$uris" 2>"$APTDIR/resolve.err" ||
    { cat "$APTDIR/resolve.err" >&2; die "could not resolve the $DEB_ARCH closure of ${DEB_ROOTS[*]}"; }
  local hdr_uris="$APTDIR/headers.txt"
  apt-get download -qq --print-uris "${DEB_HEADERS[@]}" >"$hdr_uris" 2>"$APTDIR/resolve.err" ||
    { cat "$APTDIR/resolve.err" >&2; die "could not find ${DEB_HEADERS[*]} ($DEB_ARCH)"; }
  local files=() hdr_files=() specs=() total=0 new=0 nnew=0 f size name ver _url _hash list
  for list in "$uris" "$hdr_uris"; do
    while read -r _url f size _hash; do
      if [[ $list == "$uris" ]]; then files+=("$f"); else hdr_files+=("$f"); fi
      total=$((total + size))
      [[ -f "$DEBS/$f" ]] && continue
      name=${f%%_*}; ver=${f#*_}; ver=${ver%_*}; ver=${ver//%3a/:}
      specs+=("$name=$ver"); new=$((new + size)); nnew=$((nnew + 1))
    done <"$list"
  done
  ((${#files[@]} > 0)) || die "empty package closure (see $uris)"
  ((${#hdr_files[@]} == ${#DEB_HEADERS[@]})) || die "expected ${#DEB_HEADERS[@]} header packages (see $hdr_uris)"
  log "$DEB_ARCH closure: ${#files[@]} packages + ${#hdr_files[@]} for headers, $(human $total); to download: $nnew ($(human $new))"

  mkdir -p "$DEBS"
  if ((nnew > 0)); then
    # Download into a scratch dir and move in afterwards, so an interrupted run never
    # leaves a truncated .deb that a later run would trust.
    local stage="$DEBS/.stage"
    rm -rf "$stage"; mkdir -p "$stage"
    (cd "$stage" && apt-get download -q "${specs[@]}" >&2) || die "apt-get download failed"
    mv "$stage"/*.deb "$DEBS"/; rmdir "$stage"
  fi
  # Drop .debs superseded by newer point releases so the cache does not grow forever.
  local keep; keep=$(printf '%s\n' "${files[@]}" "${hdr_files[@]}")
  for f in "$DEBS"/*.deb; do grep -qxF "$(basename "$f")" <<<"$keep" || rm -f "$f"; done

  log "unpacking into $SYSROOT"
  rm -rf "$SYSROOT"; mkdir -p "$SYSROOT"
  for f in "${files[@]}"; do dpkg -x "$DEBS/$f" "$SYSROOT" || die "dpkg -x $f failed"; done
  [[ -x "$PYTHON" ]] || die "python3.11 not found in sysroot after unpacking"
  # Absolute symlinks (amd64's /lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/...)
  # would resolve on the host, where an aarch64 host has no such file: point them inside.
  local link dest
  while IFS= read -r link; do
    dest=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$SYSROOT$dest")" "$link"
  done < <(find "$SYSROOT" -type l -lname '/*')
  # Headers only (the static libpython and the rest stay out). Debian's pyconfig.h is a
  # dispatcher that includes <ARCH-linux-gnu/python3.11/pyconfig.h>; putting the real one
  # in its place makes PY_INCLUDE a single, self-contained -I directory.
  local hdr_tmp="$CACHE/.headers"
  rm -rf "$hdr_tmp"; mkdir -p "$hdr_tmp" "$SYSROOT/usr/include"
  for f in "${hdr_files[@]}"; do dpkg -x "$DEBS/$f" "$hdr_tmp" || die "dpkg -x $f failed"; done
  cp -a "$hdr_tmp/usr/include/python3.11" "$SYSROOT/usr/include/" &&
    cp "$hdr_tmp/usr/include/$ARCH-linux-gnu/python3.11/pyconfig.h" "$PY_INCLUDE/pyconfig.h" ||
    die "the $DEB_ARCH Python headers are not where expected in ${hdr_files[*]}"
  rm -rf "$hdr_tmp"

  # qemu -L looks a path up in the sysroot first and falls back to the host's file when
  # it is missing there. Anything the guest must NOT see from the host gets a stand-in:
  # - /proc/cpuinfo: qemu 7.2 passes the host's one through, which describes the other
  #   architecture. torch 2.10.0 happens to tolerate an x86 one, but newer torch segfaults
  #   parsing it at import. Features come from AT_HWCAP (aarch64) or CPUID (x86-64), set by
  #   qemu per -cpu, so one generic description per architecture serves every QEMU_CPU.
  # - the host's /usr/lib/python3/dist-packages and /usr/local/lib/python3.11 hold the host's
  #   extension modules that Debian's site.py would otherwise put on sys.path.
  mkdir -p "$SYSROOT/proc" "$SYSROOT/usr/lib/python3/dist-packages" \
    "$SYSROOT/usr/local/lib/python3.11/dist-packages"
  local i n; n=$(nproc)
  : >"$SYSROOT/proc/cpuinfo"
  for ((i = 0; i < n; i++)); do
    if [[ $ARCH == aarch64 ]]; then
      printf 'processor\t: %d\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n\n' "$i"
    else
      printf 'processor\t: %d\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 6\nmodel name\t: QEMU TCG CPU version 2.5+\nflags\t\t: fpu de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 syscall nx lm pni ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand bmi1 avx2 bmi2\n\n' "$i"
    fi >>"$SYSROOT/proc/cpuinfo"
  done
  # Debian compiles the stdlib in postinst, which dpkg -x skips. The host's CPython 3.11
  # writes the same bytecode format, and compiling natively is far cheaper than letting
  # every emulated run compile (or fail to cache) it.
  "$HOST_PYTHON" -m compileall -q -j0 "$SYSROOT/usr/lib/python3.11" >/dev/null 2>&1 || true
  # The package lists and apt's binary caches (~120 MB) are only needed while
  # resolving; any later rebuild runs apt-get update again anyway.
  rm -rf "$APTDIR/state/lists" "$APTDIR/cache"
}

# The machine's pip config adds local find-links/index dirs that may not exist, and
# --target makes pip warn about dirs it keeps (wanted in the kernels step): drop that noise.
pip_q() {
  PIP_ROOT_USER_ACTION=ignore "$HOST_PYTHON" -m pip "$@" 2>&1 |
    grep -v -e 'is ignored: it is neither a file nor a directory' \
      -e '^WARNING: Target directory .* already exists' >&2
  return "${PIPESTATUS[0]}"
}

# The requirements in a torch wheel's metadata whose markers hold on $ARCH Linux with
# CPython 3.11 (pip would judge the markers by the host), minus the names PY_SPECS pins.
torch_target_deps() {
  "$HOST_PYTHON" - "$1" "$ARCH" "${PY_SPECS[@]}" <<'EOF'
import re, sys, zipfile
from pip._vendor.packaging.requirements import Requirement
whl, arch, *pinned = sys.argv[1:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
pinned = {norm(re.split(r"[=<>!~ ]", spec)[0]) for spec in pinned}
env = {"platform_machine": arch, "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
       "python_version": "3.11", "python_full_version": "3.11.2", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "extra": ""}
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
for line in lines:
    if line.startswith("Requires-Dist:"):
        req = Requirement(line.split(":", 1)[1].strip())
        if (req.marker is None or req.marker.evaluate(env)) and norm(req.name) not in pinned:
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            print(f"{req.name}{extras}{req.specifier}")
EOF
}

build_site() {
  "$HOST_PYTHON" -m pip --version >/dev/null 2>&1 || die "host $HOST_PYTHON has no pip"
  mkdir -p "$WHEELS"
  local before; before=$(ls "$WHEELS")
  log "pip download ($ARCH wheels) -> $WHEELS"
  pip_q download -q --no-cache-dir --dest "$WHEELS" "${PLATFORM_ARGS[@]}" --no-deps "$TORCH_SPEC" || die "pip download $TORCH_SPEC failed"
  pip_q download -q --no-cache-dir --dest "$WHEELS" "${PLATFORM_ARGS[@]}" "${PY_SPECS[@]}" || die "pip download of the Python deps failed"
  # What torch's metadata asks for on the target that PY_SPECS does not name: nothing for a
  # CPU build; NVIDIA's libraries (and triton) for PyPI's x86-64 CUDA builds.
  local torch_whl extra=()
  torch_whl=$(ls "$WHEELS"/torch-"$TORCH_VERSION"*_"$ARCH".whl 2>/dev/null | sort -r | head -n1 || true)
  [[ -n $torch_whl ]] || die "no torch $TORCH_VERSION wheel for $ARCH in $WHEELS"
  mapfile -t extra < <(torch_target_deps "$torch_whl")
  if ((${#extra[@]})); then
    log "torch's metadata names ${#extra[@]} more packages for $ARCH Linux: ${extra[*]}"
    pip_q download -q --no-cache-dir --dest "$WHEELS" "${PLATFORM_ARGS[@]}" "${extra[@]}" || die "pip download of torch's dependencies failed"
  fi
  local kernels_ok=1
  pip_q download -q --no-cache-dir --dest "$WHEELS" "${PLATFORM_ARGS[@]}" "$KERNELS_SPEC" || { kernels_ok=0; log "WARNING: $KERNELS_SPEC has no usable $ARCH wheels; skipping it"; }
  local f new=0 size
  for f in "$WHEELS"/*.whl; do
    grep -qxF "${f##*/}" <<<"$before" && continue
    size=$(stat -c %s "$f"); new=$((new + size))
    log "  downloaded $(human "$size") ${f##*/}"
  done
  log "wheels: $(du -sh "$WHEELS" | cut -f1) cached, $(human $new) downloaded now"

  log "installing into $SITE"
  rm -rf "$SITE"; mkdir -p "$SITE"
  local inst=(install -q --no-warn-conflicts --no-index --find-links "$WHEELS" --target "$SITE" "${PLATFORM_ARGS[@]}")
  pip_q "${inst[@]}" --no-deps "$TORCH_SPEC" || die "pip install $TORCH_SPEC failed"
  pip_q "${inst[@]}" "${PY_SPECS[@]}" || die "pip install of the Python deps failed"
  if ((${#extra[@]})); then
    pip_q "${inst[@]}" "${extra[@]}" || die "pip install of torch's dependencies failed"
  fi
  if ((kernels_ok)); then
    # --target skips packages already present, so the core set above keeps its versions.
    pip_q "${inst[@]}" "$KERNELS_SPEC" || log "WARNING: pip install $KERNELS_SPEC failed; continuing without it"
  fi
  # The unit tests bundled with torch are unused here; console scripts in bin/ would
  # carry the host's shebangs and mislead.
  rm -rf "$TORCH_DIR/test" "$SITE/bin"
  [[ -x "$TORCH_DIR/bin/torch_shm_manager" ]] || die "torch/bin/torch_shm_manager missing: import torch would fail"
  # Marks a complete install (separately from the verified stamp), so a failed
  # verification does not force the 190 MB of wheels to be unpacked again.
  site_fingerprint >"$SITE/.site-fingerprint"
  log "site: $(du -sh "$SITE" | cut -f1), sysroot: $(du -sh "$SYSROOT" | cut -f1)"
}

run_emulated() {
  # The host's PYTHONHOME/PYTHONPATH name the host's installs: drop/replace them. No user site
  # either: ~/.local/lib/python3.11 belongs to the host interpreter.
  # Always reached via exec (from `run`, or inside a $(...) subshell in verify).
  export QEMU_CPU
  exec env -u PYTHONHOME PYTHONNOUSERSITE=1 \
    PYTHONPATH="$SITE${AARCH64_PYTHONPATH:+:$AARCH64_PYTHONPATH}" \
    "$QEMU" -cpu "$QEMU_CPU" -L "$SYSROOT" "$PYTHON" "$@"
}

verify() {
  local cpu out rc t
  # Python + numpy must work on every core: that proves the sysroot and the emulation.
  for cpu in "${VERIFY_CPUS[@]}"; do
    out=$(QEMU_CPU=$cpu run_emulated -c 'import numpy, platform; print(platform.machine(), "numpy", numpy.__version__, numpy.arange(10).sum())' 2>&1) ||
      { printf '%s\n' "$out" >&2; die "python/numpy check under QEMU_CPU=$cpu failed"; }
    log "QEMU_CPU=$cpu: $out"
  done
  local check='import time; t=time.perf_counter()
import torch, numpy
dt=time.perf_counter()-t
print(torch.__version__, torch.backends.cpu.get_cpu_capability(), torch.ones(3).sum(), f"(import torch+numpy {dt:.1f}s)")'
  local armv80=yes
  [[ $ARCH == aarch64 ]] || armv80=n/a
  for cpu in "${VERIFY_CPUS[@]}"; do
    t=$(date +%s); rc=0
    out=$(QEMU_CPU=$cpu run_emulated -c "$check" 2>&1) || rc=$?
    if ((rc == 0)); then
      log "QEMU_CPU=$cpu: $out, process $(($(date +%s) - t))s"
    elif [[ $cpu == cortex-a72 ]] && ((rc == 128 + 4)); then
      # SIGILL on the ARMv8.0 core only: the wheel itself needs ARMv8.1+ (see header).
      armv80=no
      log "WARNING: import torch $TORCH_VERSION dies with SIGILL under QEMU_CPU=$cpu (ARMv8.0):" \
        "the wheel uses ARMv8.1 LSE atomics (pytorch/pytorch#174344). Use QEMU_CPU=neoverse-n1" \
        "for torch, or SPEC_VERIFY_AARCH64_TORCH=2.9.1 for an ARMv8.0 torch."
    else
      printf '%s\n' "$out" >&2
      die "import torch under QEMU_CPU=$cpu failed (exit $rc)"
    fi
  done
  echo "$armv80" >"$SITE/.torch-armv80"
  if [[ -d "$SITE/kernels" ]]; then
    if out=$(QEMU_CPU=$(qemu_torch_cpu_for "$ARCH") run_emulated -c 'from kernels import get_kernel; import kernels; print("kernels", kernels.__version__, "imports")' 2>&1); then
      log "$out"
    else
      log "WARNING: kernels installed but does not import under emulation: $(tail -n1 <<<"$out")"
    fi
  fi
}

setup() {
  is_ready && { log "up to date ($SITE)"; return 0; }
  ensure_qemu
  command -v dpkg >/dev/null && command -v apt-get >/dev/null || die "needs a Debian host (dpkg, apt-get)"
  mkdir -p "$CACHE"
  # Two concurrent setups (e.g. parallel CI steps) would trample each other's trees.
  exec 9>"$CACHE/.lock"
  flock 9
  # fd 9 is closed again before returning: `run` execs qemu next, which must not keep
  # holding the lock for as long as the emulated program runs.
  is_ready && { log "up to date (built by a concurrent run)"; exec 9>&-; return 0; }
  log "setting up emulated $ARCH python + torch $TORCH_VERSION in $CACHE"
  rm -f "$SITE_STAMP"  # the site is re-verified whenever anything below runs
  if ! sysroot_ready; then
    rm -f "$SYSROOT_STAMP"
    build_sysroot
    sysroot_fingerprint >"$SYSROOT_STAMP"
  fi
  [[ -f "$TORCH_DIR/__init__.py" && -f "$SITE/.site-fingerprint" && \
    "$(cat "$SITE/.site-fingerprint")" == "$(site_fingerprint)" ]] || build_site
  verify
  site_fingerprint >"$SITE_STAMP"
  exec 9>&-
  log "setup done in $(($(date +%s) - T0))s"
}

case "${1:-}" in
  setup) setup ;;
  run)
    shift
    is_ready || setup
    run_emulated "$@"
    ;;
  path)
    is_ready || setup
    printf 'SYSROOT=%s\nSITE=%s\nTORCH_DIR=%s\nPYTHON=%s\nTORCH_VERSION=%s\nTORCH_ARMV80=%s\nPY_INCLUDE=%s\n' \
      "$SYSROOT" "$SITE" "$TORCH_DIR" "$PYTHON" "$TORCH_VERSION" \
      "$(cat "$SITE/.torch-armv80" 2>/dev/null || echo unknown)" "$PY_INCLUDE"
    ;;
  *)
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
