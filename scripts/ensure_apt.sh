#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not installed yet
# (idempotent; `apt-get update` only when something is missing). Needs root, as CI has.
set -euo pipefail
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "spec-verify needs the Debian packages ${missing[*]}; as root run:" >&2
  echo "  apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
