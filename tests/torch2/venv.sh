#!/usr/bin/env bash
# venv.sh: create, if it is missing, the virtual environment with PyTorch 2.x
# (the pins in requirements.txt beside this script) outside the checkout,
# and print its interpreter's path as the last line.
#
# Where: $GORUN_TORCH2_VENV if set, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/gorun/torch2-<hash of requirements.txt>.
# A clone, another clone and CI share it; a change of the pins makes a new
# one. An environment whose install did not finish (no .complete file) is
# removed and made again; two callers at once wait for each other (flock).
#
# venv.sh --find prints the path only where the environment is complete,
# and installs nothing (exit 1 otherwise): the tests look it up that way.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
req="$here/requirements.txt"
base_python="${GORUN_TORCH2_BASE_PYTHON:-python3}"
hash="$(sha256sum "$req" | cut -c1-12)"
venv="${GORUN_TORCH2_VENV:-${XDG_CACHE_HOME:-${HOME:?HOME is not set; set GORUN_TORCH2_VENV}/.cache}/gorun/torch2-$hash}"

if [ "${1:-}" = --find ]; then
  [ -f "$venv/.complete" ] || { echo "venv.sh: no PyTorch 2.x environment at $venv (make torch2-python makes it)" >&2; exit 1; }
  echo "$venv/bin/python"
  exit 0
fi
[ $# -eq 0 ] || { echo "venv.sh: unknown argument $1 (want none, or --find)" >&2; exit 2; }

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  echo "venv.sh: installing $(grep -v '^#' "$req" | xargs) into $venv (a first install downloads about 3 GB, 5.3 GB installed)" >&2
  start=$(date +%s)
  "$base_python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req" >&2
  "$venv/bin/python" -c 'import torch, torch.distributed.run' >&2
  cp "$req" "$venv/.complete"
  echo "venv.sh: installed in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv/bin/python"
