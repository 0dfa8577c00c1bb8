#!/usr/bin/env python3
"""Generate a small synthetic event file for the series example: hospital admissions with a date-time column.

*Synthetic test data*, not privacy noise: Python's seeded ``random.Random`` with a fixed default seed, so the
committed sample (``sample_data/admissions.csv``) is reproducible byte for byte. No row describes a real person or
event; the patient ids are made up.

Usage::

    python scripts/generate_admissions.py --output sample_data/admissions.csv

Columns: ``admitted`` (when, ISO 8601: mostly UTC ``Z``, some with a ``+01:00`` / ``+02:00`` offset, some naive,
which dpcli reads as UTC, and a few blank or unparseable, which count in no period), ``patient`` (a made-up id:
patients come back, so a patient has several rows), ``ward`` and ``stay_days`` (0..45; the spec bounds it at 30).
Rows are in time order, as an event log appends them: days from ``--start`` for ``--days`` days, a weekly rhythm
and a slow rise.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

DEFAULT_SEED = 20260101
DEFAULT_START = "2026-01-01"
DEFAULT_DAYS = 90
WARDS = {"medicine": 0.45, "surgery": 0.30, "maternity": 0.15, "paediatrics": 0.10}
PATIENTS = 1500  # a pool of made-up ids: with ~40 admissions a day, many patients come back


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method (small means only)."""
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _when(rng: random.Random, instant: datetime) -> str:
    """An instant written as an event log might: UTC with Z (most), with an offset, naive (UTC), or broken."""
    form = rng.random()
    if form < 0.70:
        return instant.strftime("%Y-%m-%dT%H:%M:%SZ")
    if form < 0.85:
        hours = rng.choice((1, 2))
        local = instant + timedelta(hours=hours)
        return local.strftime("%Y-%m-%dT%H:%M:%S") + f"+0{hours}:00"
    if form < 0.99:
        return instant.strftime("%Y-%m-%d %H:%M:%S")
    return rng.choice(("", "unknown", "31/02/2026"))


def rows(seed: int, start: datetime, days: int) -> list[list[str]]:
    rng = random.Random(seed)
    wards, weights = list(WARDS), list(WARDS.values())
    out = []
    for day in range(days):
        weekday = (start + timedelta(days=day)).weekday()
        mean = (44 if weekday < 5 else 30) * (1 + 0.002 * day)
        for _ in range(_poisson(rng, mean)):
            instant = start + timedelta(days=day, seconds=rng.randrange(86400))
            ward = rng.choices(wards, weights)[0]
            stay = min(45, int(rng.expovariate(1 / (4.5 if ward != "maternity" else 2.0))))
            out.append((instant, [_when(rng, instant), f"P{rng.randrange(PATIENTS):05d}", ward, str(stay)]))
    out.sort(key=lambda pair: pair[0])
    return [row for _instant, row in out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--start", default=DEFAULT_START, help="the first day (UTC), YYYY-MM-DD")
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS)
    args = parser.parse_args()
    start = datetime.fromisoformat(args.start).replace(tzinfo=UTC)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["admitted", "patient", "ward", "stay_days"])
        writer.writerows(rows(args.seed, start, args.days))
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
