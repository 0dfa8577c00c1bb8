#!/usr/bin/env bash
# Compare dpcli's samplers with OpenDP's in a separate venv, .bench-venv (git-ignored).
# opendp is installed only there: it is never a dependency of dpcli.
#   bash bench/opendp_venv.sh [--size N] [--repeat R]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.bench-venv
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet numpy cryptography opendp
"$VENV/bin/python" -m pip install --quiet -e .
exec "$VENV/bin/python" bench/bench_samplers.py "$@"
