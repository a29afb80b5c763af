#!/usr/bin/env bash
# Creates (or completes) the virtual environment: setup_venv.sh VENV REQUIREMENTS
set -euo pipefail
venv=$1 requirements=$2
python=$(command -v python3.11 || command -v python3)
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
log=$(mktemp)
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >"$log" 2>&1; then
  cat "$log"; rm -f "$log"; exit 1
fi
# This machine's pip configuration names index folders that may not exist: not our business.
grep -v "is ignored: it is neither a file nor a directory" "$log" || true
rm -f "$log"
"$venv/bin/python" -c "import torch, kernels, numpy, pytest, kernel_abi_check"
touch "$venv/.requirements-installed"
