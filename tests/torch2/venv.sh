#!/usr/bin/env bash
# venv.sh: create, if it is missing, the virtual environment with PyTorch 2.x
# (the pins in requirements.txt beside this script) outside the checkout,
# and print its interpreter's path as the last line.
#
# venv.sh rivals.txt makes the benchmarks' environment instead: the same
# PyTorch and the launchers gorun is measured beside.
#
# Where: $GORUN_TORCH2_VENV if set (requirements.txt's only), else
# ${XDG_CACHE_HOME:-$HOME/.cache}/gorun/torch2-<hash of the pins>.
# A clone, another clone and CI share it; a change of the pins makes a new
# one. An environment whose install did not finish (no .complete file) is
# removed and made again; two callers at once wait for each other (flock).
#
# venv.sh --find [FILE] prints the path only where the environment is
# complete, and installs nothing (exit 1 otherwise): the tests look it up
# that way.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
find=
if [ "${1:-}" = --find ]; then find=1; shift; fi
name="${1:-requirements.txt}"
[ $# -le 1 ] || { echo "venv.sh: too many arguments (want [--find] [requirements.txt|rivals.txt])" >&2; exit 2; }
case "$name" in
  requirements.txt|rivals.txt) ;;
  *) echo "venv.sh: unknown argument $name (want [--find] [requirements.txt|rivals.txt])" >&2; exit 2 ;;
esac
req="$here/$name"
base_python="${GORUN_TORCH2_BASE_PYTHON:-python3}"
# The pins of the environment: requirements.txt's, and the rivals' on top.
hash="$(cat "$here/requirements.txt" | sha256sum | cut -c1-12)"
[ "$name" = requirements.txt ] || hash="rivals-$(cat "$here/requirements.txt" "$req" | sha256sum | cut -c1-12)"
default="${XDG_CACHE_HOME:-${HOME:?HOME is not set; set GORUN_TORCH2_VENV}/.cache}/gorun/torch2-$hash"
venv="$default"
[ "$name" != requirements.txt ] || venv="${GORUN_TORCH2_VENV:-$default}"

if [ -n "$find" ]; then
  [ -f "$venv/.complete" ] || { echo "venv.sh: no environment of $name at $venv (make torch2-python, make rivals-python make them)" >&2; exit 1; }
  echo "$venv/bin/python"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  echo "venv.sh: installing $(grep -hv '^#' "$here/requirements.txt" "$req" | sort -u | xargs) into $venv (a first install downloads about 3 GB, 5.3 GB installed)" >&2
  start=$(date +%s)
  "$base_python" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$here/requirements.txt" >&2
  [ "$name" = requirements.txt ] || "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req" >&2
  "$venv/bin/python" -c 'import torch, torch.distributed.run' >&2
  cat "$here/requirements.txt" "$req" > "$venv/.complete"
  echo "venv.sh: installed in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv/bin/python"
