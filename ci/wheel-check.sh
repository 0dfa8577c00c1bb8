#!/usr/bin/env bash
# The wheel as a user gets it: built from this tree, installed (not editable) into a fresh venv, and run from a
# directory outside the source tree, so nothing is imported from ./dpcli by accident. Checks that the wheel carries
# py.typed, that `dpcli --version` prints the one version source (dpcli/__init__.py), that `dpcli schema` is JSON,
# and a real plan and release of configs/example.yaml on the sample data.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$work/dist" "$root"
wheel=("$work"/dist/dpcli-*.whl)
echo "wheel-check: built ${wheel[0]##*/}"
# listed to a file, not piped: `grep -q` stops reading at its match, and under pipefail the lister's broken pipe failed
# the check once the wheel's listing outgrew the pipe's buffer
"$python" -m zipfile -l "${wheel[0]}" > "$work/listing"
grep -q 'dpcli/py.typed' "$work/listing" || { echo "wheel-check: py.typed missing" >&2; exit 1; }

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${wheel[0]}"

mkdir -p "$work/run/configs" "$work/run/sample_data"
cp "$root/configs/example.yaml" "$work/run/configs/"
cp "$root/sample_data/people.csv" "$work/run/sample_data/"
cd "$work/run"
export PATH="$work/venv/bin:$PATH"

# the package comes from the venv, not from a source tree
location="$(python -c 'import dpcli, pathlib; print(pathlib.Path(dpcli.__file__).parent)')"
case "$location" in
  "$work/venv/"*) ;;
  *) echo "wheel-check: dpcli imported from $location, not from the installed wheel" >&2; exit 1 ;;
esac

expected="$(sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' "$root/dpcli/__init__.py")"
version="$(dpcli --version)"
[[ "$version" == *"$expected"* ]] || { echo "wheel-check: 'dpcli --version' says '$version', expected $expected" >&2; exit 1; }
dpcli schema | python -c 'import json, sys; json.load(sys.stdin)'
dpcli plan configs/example.yaml >/dev/null
dpcli budget set people --epsilon 3 --ledger ledger.jsonl
dpcli release configs/example.yaml --ledger ledger.jsonl --output out.csv --quiet
[ "$(head -1 out.csv | cut -d, -f1)" = statistic ] || { echo "wheel-check: out.csv has no table header" >&2; exit 1; }
echo "wheel-check: OK ($version; schema, plan and a release ran from outside the source tree)"
