#!/usr/bin/env python3
"""Generate ``sample_data/panel.csv``: a synthetic panel with person ids, for the person-level examples (issue 12).

This is *synthetic test data*, not privacy noise: numpy's seeded PCG64 generator with a fixed default seed, so the
committed file is reproducible byte for byte (for a given numpy). No row describes a real person. Nothing here is
used by dpcli to protect anything.

Usage::

    python sample_data/make_panel.py                                   # writes sample_data/panel.csv
    python sample_data/make_panel.py --persons 100000 --output /tmp/panel.csv --seed 7

What it holds (sample_data/README.md has the table): one row per person and year of a health-insurance style
panel (``person_id, year, region, plan, visits, spend``). Most persons have 1 to 20 rows; a few have many more
(records duplicated by a data-entry process, several policies in one year), which is what contribution bounding
(`privacy.unit.max_rows`) is for; some rows have no person id at all (``privacy.unit.missing_id`` decides what
they are). A person may move region between years, so one person's rows can fall in several cells of a
``by: [region]`` statistic (what `max_groups` bounds).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
from pathlib import Path

import numpy as np

DEFAULT_SEED = 20261124
DEFAULT_PERSONS = 3000
FIRST_YEAR, LAST_YEAR = 2015, 2024

REGIONS = ["north", "south", "east", "west", "central"]
REGION_P = [0.22, 0.27, 0.18, 0.21, 0.12]
PLANS = ["basic", "standard", "premium"]
PLAN_P = [0.35, 0.45, 0.20]
PLAN_SPEND_SCALE = np.array([0.7, 1.0, 1.6])  # a costlier plan: more is spent per visit

MISSING_ID_RATE = 0.004  # share of rows whose person_id cell is empty
MANY_ROWS_RATE = 0.01  # share of persons with 25-150 rows (duplicated records, several policies a year)
MOVE_RATE = 0.08  # chance per year that a person's region changes


def panel_rows(persons: int, seed: int) -> list[tuple[str, int, str, str, int, str]]:
    """(person_id, year, region, plan, visits, spend) rows: persons in id order, their rows in year order."""
    rng = np.random.Generator(np.random.PCG64(seed))
    rows: list[tuple[str, int, str, str, int, str]] = []
    years = LAST_YEAR - FIRST_YEAR + 1
    for p in range(persons):
        person_id = f"P{p + 1:06d}"
        # how many rows: a stay of 1-10 years (geometric-ish), sometimes a second record in a year; a few persons
        # have many rows
        many = rng.random() < MANY_ROWS_RATE
        n_rows = int(rng.integers(25, 151)) if many else min(20, int(rng.geometric(0.18)))
        first = int(rng.integers(FIRST_YEAR, LAST_YEAR + 1))
        stay = min(years - (first - FIRST_YEAR), max(1, n_rows))
        row_years = np.sort(first + np.concatenate([np.arange(stay), rng.integers(0, stay, max(0, n_rows - stay))]))
        region = int(rng.choice(len(REGIONS), p=REGION_P))
        plan = int(rng.choice(len(PLANS), p=PLAN_P))
        frailty = rng.gamma(2.0, 0.5)  # a person's own level of use, kept over the years
        previous_year = None
        for year in row_years.tolist():
            if previous_year is not None and year != previous_year and rng.random() < MOVE_RATE:
                region = int(rng.choice(len(REGIONS), p=REGION_P))
            previous_year = year
            visits = int(min(60, rng.poisson(3.0 * frailty)))
            spend = float(visits * rng.lognormal(np.log(120.0), 0.8) * PLAN_SPEND_SCALE[plan])
            if rng.random() < 0.02:  # a hospital stay: a large bill
                spend += float(rng.lognormal(np.log(8000.0), 0.9))
            rows.append((person_id, int(year), REGIONS[region], PLANS[plan], visits, f"{spend:.2f}"))
    # some rows lost their id (drawn after the rows, so the rate never changes who the persons are)
    missing = rng.random(len(rows)) < MISSING_ID_RATE
    return [("", *row[1:]) if gone else row for row, gone in zip(rows, missing.tolist(), strict=True)]


def write(rows: list[tuple[str, int, str, str, int, str]], output: Path) -> None:
    text = io.StringIO(newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["person_id", "year", "region", "plan", "visits", "spend"])
    writer.writerows(rows)
    temporary = output.with_name(output.name + ".tmp")
    temporary.write_text(text.getvalue(), encoding="utf-8")
    os.replace(temporary, output)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--persons", type=int, default=DEFAULT_PERSONS, help="number of persons (default 3000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"generator seed (default {DEFAULT_SEED})")
    parser.add_argument("--output", type=Path, default=Path(__file__).with_name("panel.csv"),
                        help="where to write (default: panel.csv beside this script)")
    args = parser.parse_args(argv)
    write(panel_rows(args.persons, args.seed), args.output)


if __name__ == "__main__":
    main()
