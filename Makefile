# The two commands of the README: `make demo` and `make test`. Both work on a fresh machine with only python3.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-slow test-postgres test-spark test-browser test-polars-range check docs wheel wheel-check venv \
        sample-data bench clean

# The dev tools (ruff, mypy, pytest, Hypothesis, ...) at the versions of constraints-dev.txt, so `make check` and
# `make test` mean the same on every clone; dpcli's own dependencies float within pyproject.toml's bounds.
$(BIN)/dpcli: pyproject.toml constraints-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints-dev.txt -e '.[test]'
	# bytecode for our own modules: saves ~50 ms per run where PYTHONDONTWRITEBYTECODE is set
	$(BIN)/python -m compileall -q dpcli
	touch $@

venv: $(BIN)/dpcli

sample_data/people.csv: scripts/generate_people.py $(BIN)/dpcli
	$(BIN)/python scripts/generate_people.py --rows 20000 --output $@

sample-data: sample_data/people.csv

# A real release on the sample data, with a throwaway ledger under .demo/ (the cap is set first, as a user would).
demo: venv sample-data
	rm -rf .demo && mkdir -p .demo
	$(BIN)/dpcli budget set people --epsilon 10 --ledger .demo/ledger.jsonl
	$(BIN)/dpcli plan configs/example.yaml
	$(BIN)/dpcli release configs/example.yaml --ledger .demo/ledger.jsonl --release-id demo-1 --output -
	# the same release id again: the paid table is written again, nothing is spent
	$(BIN)/dpcli release configs/example.yaml --ledger .demo/ledger.jsonl --release-id demo-1 --output .demo/again.csv
	# a person-level release on the panel (many rows per person), and open keys (countries nobody listed) on Adult
	$(BIN)/dpcli budget set panel --epsilon 10 --ledger .demo/ledger.jsonl
	$(BIN)/dpcli plan configs/panel.yaml
	$(BIN)/dpcli release configs/panel.yaml --ledger .demo/ledger.jsonl --output -
	$(BIN)/dpcli budget set adult --epsilon 10 --delta 1e-5 --ledger .demo/ledger.jsonl
	$(BIN)/dpcli release configs/adult_countries.yaml --ledger .demo/ledger.jsonl --output .demo/countries.csv
	# a series over an event log (365 daily periods, charged once): day 1 charges it, day 2 spends nothing
	$(BIN)/dpcli budget set admissions --epsilon 3 --ledger .demo/ledger.jsonl
	$(BIN)/dpcli release configs/series.yaml --ledger .demo/ledger.jsonl --release-id 2026-01-01 --output .demo/day1.csv
	$(BIN)/dpcli release configs/series.yaml --ledger .demo/ledger.jsonl --release-id 2026-01-02 --output -
	# a synthetic copy of Adult (MST), charged to the same cap; the same release id again spends nothing
	$(BIN)/dpcli plan configs/synth.yaml
	$(BIN)/dpcli synth configs/synth.yaml --ledger .demo/ledger.jsonl --release-id synth-1 --output .demo/adult-synthetic.csv
	$(BIN)/dpcli synth configs/synth.yaml --ledger .demo/ledger.jsonl --release-id synth-1 --output .demo/adult-synthetic.csv
	head -5 .demo/adult-synthetic.csv
	$(BIN)/dpcli budget show --ledger .demo/ledger.jsonl

# The default suite (under 5 minutes on 2 cores); the slow statistical and soak tests run in `make test-slow`,
# which CI runs too (.ci/run). Both use the derandomised Hypothesis profile (tests/conftest.py) unless
# HYPOTHESIS_PROFILE names another, so a run that passed here passes in CI.
HYPOTHESIS_PROFILE ?= ci
export HYPOTHESIS_PROFILE

# Two workers (pytest-xdist): the suite is mostly real `dpcli` child processes, and serially it took 5m45s here.
test: venv
	$(BIN)/python -m pytest -q -n 2 -m "not slow and not spark and not postgres"

# The PostgreSQL ledger backend against a real throwaway server (tests/pg_server.py starts it; .ci/run installs
# Debian's postgresql first). Kept out of `make test` for its budget: ~50 s of CPU, a server per worker.
test-postgres: venv
	$(BIN)/python -m pytest -q -n 2 -m "postgres and not slow and not spark"

test-slow: venv
	$(BIN)/python -m pytest -q -m "slow and not spark"

# The report in a real headless Chromium (tests/publish/test_report_browser.py; also part of `make test`, which skips it when
# chromium is missing). CI=true makes a missing chromium a failure; .ci/run installs Debian's package first.
test-browser: venv
	$(BIN)/python -m pytest -q -m browser

# The Spark engine's parity tests (tests/engine/test_spark_*.py) against a local Spark: installs the `spark` extra
# (pyspark, ~500 MB) into the venv; needs Java 17. One Spark session for the whole run, so no xdist workers.
test-spark: venv
	$(BIN)/python -m pip install --quiet -e '.[spark]'
	$(BIN)/python -m pytest -q -m spark

# Lint (ruff, the rules chosen in pyproject.toml, over the whole repository), type-check the package (mypy) and
# check that the docs generated from the code (scripts/gen_docs.py: CLI reference, spec fields, limits, exit codes)
# are up to date. `ruff check --fix .` repairs the autofixable findings; `make docs` regenerates the docs.
# All run even when one fails, so one run shows every finding.
check: venv
	status=0; $(BIN)/ruff check . || status=1; $(BIN)/mypy || status=1; \
	$(BIN)/python scripts/gen_docs.py --check || status=1; exit $$status

docs: venv
	$(BIN)/python scripts/gen_docs.py

# The input and record tests (records, input formats, hostile bytes, engine, columnar) against the oldest and the
# newest polars that pyproject.toml allows, each in a throwaway venv (ci/polars-range.sh; the .venv is untouched):
# the one-line-one-record rule leans on polars' CSV behaviour. Needs the network for pip, as `make venv` does.
test-polars-range:
	PYTHON=$(PYTHON) bash ci/polars-range.sh

# A wheel to install on another machine (README.md, Install): $(DIST)/dpcli-VERSION-py3-none-any.whl, built from
# this tree by pip (no venv needed). Its dependencies are not bundled: pip fetches them where the wheel is installed.
DIST ?= dist
wheel:
	$(PYTHON) -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir $(DIST) .
	@ls $(DIST)/dpcli-*.whl

# The built wheel, installed without -e into a fresh venv, runs from outside the source tree.
wheel-check:
	PYTHON=$(PYTHON) bash ci/wheel-check.sh

# bench/README.md says what each one measures. The big-file bench builds a 3 GB CSV once (or give
# BIGFILE_CSV=path) and exits non-zero while dpcli's peak RSS is over 512 MiB, so it runs last.
BIGFILE_CSV ?=
bench: venv
	$(BIN)/python bench/bench_release.py
	$(BIN)/python bench/bench_samplers.py
	$(BIN)/python bench/bench_cells.py
	$(BIN)/python bench/bench_plan.py
	$(BIN)/python bench/bench_startup.py
	$(BIN)/python bench/bench_series_accuracy.py
	$(BIN)/python bench/bench_opendp.py
	$(BIN)/python bench/bench_person_floor.py
	$(BIN)/python bench/bench_persons.py
	$(BIN)/python bench/bench_scale.py
	$(BIN)/python bench/bench_bigfile.py $(if $(BIGFILE_CSV),--csv $(BIGFILE_CSV))

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache build dist
