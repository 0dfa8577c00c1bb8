#!/usr/bin/env bash
# The input and record tests against the oldest and the newest polars that pyproject.toml allows: the
# one-line-one-record rule and the typed columnar reads lean on polars' CSV and scan behaviour, so both ends of the
# range are run, each in a throwaway venv (the project's own .venv is left alone). The oldest is the `polars>=`
# bound of pyproject.toml's dependencies, installed exactly; the newest is what pip picks for that requirement.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"  # derandomised, as `make test` (tests/conftest.py)
tests=(tests/engine/test_records.py tests/engine/test_input_formats.py tests/hostile tests/engine/test_aggregate.py
       tests/engine/test_documented_rules.py tests/engine/test_structure.py tests/engine/test_exact_table.py
       tests/engine/test_columnar.py)

# the requirement as pyproject.toml states it, and its lower bound
requirement="$("$python" - "$root/pyproject.toml" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
(polars,) = [d for d in deps if re.match(r"polars\b", d)]
print(polars)
PY
)"
oldest="$(sed -n 's/^polars *>= *\([0-9][0-9.]*\).*/\1/p' <<<"$requirement")"
[ -n "$oldest" ] || { echo "polars-range: no 'polars>=' lower bound in '$requirement'" >&2; exit 1; }

install() {  # $1: a name for the venv; the rest: pip arguments that choose polars. Prints the polars installed.
  local name="$1"; shift
  "$python" -m venv "$work/$name"
  "$work/$name/bin/python" -m pip install --quiet --disable-pip-version-check -c "$root/constraints-dev.txt" \
    -e "$root[test]" "$@" >&2
  "$work/$name/bin/python" -c 'import polars; print(polars.__version__)'
}

run_tests() {  # $1: the venv's name
  (cd "$root" && "$work/$1/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
    -m "not slow and not spark and not postgres" "${tests[@]}")
}

oldest_seen="$(install oldest "polars==$oldest")"
echo "polars-range: the oldest allowed, polars $oldest_seen ($requirement)"
run_tests oldest
newest_seen="$(install newest --upgrade "$requirement")"
if [ "$newest_seen" = "$oldest_seen" ]; then
  echo "polars-range: the newest polars pip offers for '$requirement' is the oldest ($newest_seen): tested once"
else
  echo "polars-range: the newest allowed, polars $newest_seen"
  run_tests newest
fi
