#!/usr/bin/env bash
# Creates (or completes) the virtual environment: setup_venv.sh VENV REQUIREMENTS
set -euo pipefail
venv=$1 requirements=$2
python=$(command -v python3.11 || command -v python3)
if [ ! -x "$venv/bin/python" ]; then
  # Debian keeps venv's pip bootstrap in a package of its own (python3-venv).
  "$python" -c "import ensurepip" 2>/dev/null ||
    "$(dirname "$0")/ensure_apt.sh" "python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
  "$python" -m venv "$venv"
fi
log=$(mktemp)
# requirements.txt pins the x86-64 torch; an aarch64 host gets its own (scripts/arch.sh says
# which and why), every other requirement as written.
. "$(dirname "$0")/arch.sh"
torch_version=$(native_torch_version)
reqs=$(mktemp)
sed "s/^torch==.*/torch==$torch_version/" "$requirements" >"$reqs"
echo "setup: $NATIVE_ARCH host, torch $torch_version" >&2
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs" >"$log" 2>&1; then
  cat "$log"; rm -f "$log"; exit 1
fi
# This machine's pip configuration names index folders that may not exist: not our business.
grep -v "is ignored: it is neither a file nor a directory" "$log" || true
rm -f "$log" "$reqs"
"$venv/bin/python" -c "import torch, kernels, numpy, pytest, xdist, kernel_abi_check"
touch "$venv/.requirements-installed"
