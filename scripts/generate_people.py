#!/usr/bin/env python3
"""Generate a synthetic, realistic "people" CSV for demos, tests and benchmarks.

This is *synthetic test data*, not privacy noise: it uses numpy's seeded PCG64 generator on purpose, with a
fixed default seed, so that the committed sample (``sample_data/people.csv``) is reproducible byte for byte.
Nothing here is used by dpcli to protect anything.

Usage::

    python scripts/generate_people.py --rows 20000 --output sample_data/people.csv
    python scripts/generate_people.py --rows 10000000 --output /tmp/people_10m.csv --seed 7 --messy-rate 0.01

Columns, in order: age, sex, state, education, employed, hours_per_week, income (see sample_data/README.md).

Rows are generated and written in fixed chunks of ``CHUNK_ROWS`` rows; chunk ``k`` draws from its own
generator seeded with ``(seed, k)`` and always draws a full chunk (the last one is truncated), so:

* memory is bounded by one chunk whatever ``--rows`` is;
* the output depends only on ``--rows``, ``--seed`` and ``--messy-rate``;
* a file of N rows is exactly the first N rows of any larger file made with the same seed and messy rate;
* the messiness is drawn after the clean values, so ``--messy-rate`` never changes the underlying people.

Formatting is vectorised with polars (a dpcli dependency); no Python loop runs per row.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

DEFAULT_SEED = 20240601
DEFAULT_MESSY_RATE = 0.005
CHUNK_ROWS = 500_000  # part of the output's definition (see the module docstring): do not change lightly

COLUMNS = ["age", "sex", "state", "education", "employed", "hours_per_week", "income"]

SEXES = ["Female", "Male"]
EDUCATION = ["less_than_hs", "high_school", "some_college", "bachelors", "graduate"]

# 2020 census resident population, thousands; the 50 states and DC, alphabetical by USPS code.
STATE_POP = {
    "AK": 733, "AL": 5024, "AR": 3012, "AZ": 7152, "CA": 39538, "CO": 5774, "CT": 3606, "DC": 690,
    "DE": 990, "FL": 21538, "GA": 10712, "HI": 1455, "IA": 3190, "ID": 1839, "IL": 12813, "IN": 6786,
    "KS": 2938, "KY": 4506, "LA": 4658, "MA": 7030, "MD": 6177, "ME": 1362, "MI": 10077, "MN": 5706,
    "MO": 6155, "MS": 2961, "MT": 1084, "NC": 10439, "ND": 779, "NE": 1962, "NH": 1378, "NJ": 9289,
    "NM": 2118, "NV": 3105, "NY": 20201, "OH": 11799, "OK": 3959, "OR": 4237, "PA": 13003, "RI": 1097,
    "SC": 5118, "SD": 887, "TN": 6911, "TX": 29146, "UT": 3272, "VA": 8631, "VT": 643, "WA": 7705,
    "WI": 5894, "WV": 1794, "WY": 577,
}
STATES = sorted(STATE_POP)
assert len(STATES) == 51

# Adult age pyramid: approximate US residents per single year of age (thousands), interpolated between knots.
# Ages are drawn up to 100 (the correlations below use the true age) and then top-coded at 90, as public-use
# census files do, so "90" means "90 or over" (~1% of adults). Ages above 90 in the output are messy values only.
_AGE_KNOTS = ([18, 25, 35, 45, 55, 62, 67, 72, 77, 82, 87, 90, 95, 100],
              [4300, 4500, 4400, 4000, 4300, 4200, 3700, 3100, 2200, 1450, 850, 550, 180, 30])
AGES = np.arange(18, 101)
AGE_TOP_CODE = 90
AGE_P = np.interp(AGES, *_AGE_KNOTS)
AGE_P /= AGE_P.sum()

# Probability of being employed by age (before the education effect), interpolated between knots.
_EMPLOY_KNOTS = ([18, 20, 24, 30, 50, 58, 62, 66, 70, 75, 80, 90, 100],
                 [0.42, 0.62, 0.72, 0.80, 0.80, 0.70, 0.55, 0.32, 0.20, 0.10, 0.05, 0.02, 0.01])
EDU_EMPLOY_LOGIT = np.array([-0.5, -0.1, 0.0, 0.3, 0.45])

# Education as an ordered latent normal: thresholds put ~9/28/26/23/14 % in the five levels at ages 25-60
# (standard-normal quantiles of 0.09, 0.37, 0.63, 0.86).
EDU_CUTS = np.array([-1.3408, -0.3319, 0.3319, 1.0803])

# Median full-time annual income by education (USD); log-normal around these.
EDU_MEDIAN_INCOME = np.array([28_000, 38_000, 45_000, 68_000, 88_000], dtype=np.float64)

# Messy cells: what a messy numeric cell becomes.  0 = the value, 1 = empty, 2-4 = unparseable tokens,
# 5 = a value above the top-code (age only: the only way an age above 90 reaches the file).
TOKENS = ["n/a", "?", "unknown"]
AGE_OUTLIERS = np.array([95, 97, 99, 101, 104, 107, 110, 117, 120])


def _kinds(rng: np.random.Generator, n: int, rate: float, with_outliers: bool) -> np.ndarray:
    """Per cell: 0 clean, else the kind of mess (see TOKENS above). Always draws the same amount of randomness."""
    messy = rng.random(n) < rate
    u = rng.random(n)
    if with_outliers:
        kind = np.select([u < 0.60, u < 0.68, u < 0.76, u < 0.84], [1, 2, 3, 4], default=5)
    else:
        kind = np.select([u < 0.70, u < 0.80, u < 0.90], [1, 2, 3], default=4)
    return np.where(messy, kind, 0).astype(np.int8)


def generate_chunk(seed: int, chunk_index: int, messy_rate: float) -> dict[str, np.ndarray]:
    """One full chunk of CHUNK_ROWS people as numpy arrays (codes for categories, mess kinds alongside)."""
    rng = np.random.default_rng([seed, chunk_index])
    n = CHUNK_ROWS

    age = rng.choice(AGES, size=n, p=AGE_P).astype(np.int64)

    # More women at older ages.
    p_female = 0.49 + 0.20 * np.clip((age - 60) / 35.0, 0.0, 1.0)
    sex = (rng.random(n) >= p_female).astype(np.int64)  # 0 Female, 1 Male

    state = rng.choice(len(STATES), size=n, p=np.array([STATE_POP[s] for s in STATES], float) / sum(STATE_POP.values()))

    # Education: the young are still in school, older cohorts have less formal schooling on average.
    shift = np.where(age < 22, -0.6, np.where(age < 25, -0.3, 0.0)) - 0.012 * np.maximum(age - 60, 0)
    edu = np.searchsorted(EDU_CUTS, rng.standard_normal(n) + shift)
    edu = np.where(age <= 21, np.minimum(edu, 2), edu)  # no degree before 22
    edu = np.where(age <= 23, np.minimum(edu, 3), edu)  # no graduate degree before 24

    p_emp = np.interp(age, *_EMPLOY_KNOTS)
    logit = np.log(p_emp / (1 - p_emp)) + EDU_EMPLOY_LOGIT[edu]
    employed = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))

    # Hours: 18% part-time (~22), half of the employed at exactly 40, the rest spread from 35 up.
    u = rng.random(n)
    part = np.clip(np.rint(rng.normal(22, 7, n)), 1, 34)
    full = np.clip(np.rint(rng.normal(45, 8, n)), 35, 99)
    hours = np.where(u < 0.18, part, np.where(u < 0.68, 40, full))
    hours = np.where(employed, hours, 0).astype(np.int64)

    # Income: log-normal around an education median, scaled by hours and an experience curve, with a fat
    # upper tail; the non-employed have zero or a smaller (benefits, pensions) income.
    experience = -0.6 * ((np.minimum(age, 48) - 48) / 30.0) ** 2 - 0.01 * np.maximum(age - 60, 0)
    log_work = (np.log(EDU_MEDIAN_INCOME[edu]) + 0.9 * np.log(np.maximum(hours, 1) / 40.0) + experience
                + rng.normal(0, 0.55, n) + (rng.random(n) < 0.02) * np.minimum(rng.exponential(0.7, n), 4.0))
    retired = age >= 65
    log_other = np.where(retired, np.log(24_000), np.log(12_000)) + 0.25 * (edu - 1) + rng.normal(0, 0.75, n)
    no_income = rng.random(n) < np.where(retired, 0.08, 0.40)
    income = np.where(employed, np.exp(log_work), np.where(no_income, 0.0, np.exp(log_other)))
    cents = np.rint(income * 100).astype(np.int64)

    # Messiness, drawn last so that the messy rate never changes the clean values above.
    age_kind = _kinds(rng, n, messy_rate, with_outliers=True)
    age = np.where(age_kind == 5, rng.choice(AGE_OUTLIERS, size=n), np.minimum(age, AGE_TOP_CODE))
    hours_kind = _kinds(rng, n, messy_rate, with_outliers=False)
    income_kind = _kinds(rng, n, messy_rate, with_outliers=False)
    sex_messy = rng.random(n) < messy_rate
    sex_kind = np.where(sex_messy, np.where(rng.random(n) < 0.5, 1, 2), 0).astype(np.int8)  # 1 empty, 2 "X"

    return {
        "age": age, "age_kind": age_kind, "sex": sex, "sex_kind": sex_kind, "state": state, "edu": edu,
        "employed": employed, "hours": hours, "hours_kind": hours_kind, "cents": cents, "income_kind": income_kind,
    }


def _messy(value: pl.Expr, kind: str) -> pl.Expr:
    """A string column: the value where the kind is 0 or 5, nothing (empty) where 1, a token where 2-4."""
    k = pl.col(kind)
    return (pl.when(k == 1).then(pl.lit(None, pl.String))
            .when(k == 2).then(pl.lit(TOKENS[0]))
            .when(k == 3).then(pl.lit(TOKENS[1]))
            .when(k == 4).then(pl.lit(TOKENS[2]))
            .otherwise(value))


def format_chunk(arrays: dict[str, np.ndarray], rows: int) -> pl.DataFrame:
    """The chunk's first ``rows`` rows as a frame of the output columns (strings where mess can occur)."""
    df = pl.DataFrame({k: v[:rows] for k, v in arrays.items()})
    sex = pl.Series(SEXES).gather(df["sex"])
    state = pl.Series(STATES).gather(df["state"])
    edu = pl.Series(EDUCATION).gather(df["edu"])
    cents = pl.col("cents")
    income = cents.floordiv(100).cast(pl.String) + "." + cents.mod(100).cast(pl.String).str.zfill(2)
    return df.with_columns(sex=sex, state=state, edu=edu).select(
        _messy(pl.col("age").cast(pl.String), "age_kind").alias("age"),
        pl.when(pl.col("sex_kind") == 1).then(pl.lit(None, pl.String))
        .when(pl.col("sex_kind") == 2).then(pl.lit("X"))
        .otherwise(pl.col("sex")).alias("sex"),
        pl.col("state"),
        pl.col("edu").alias("education"),
        pl.col("employed").cast(pl.String),
        _messy(pl.col("hours").cast(pl.String), "hours_kind").alias("hours_per_week"),
        _messy(income, "income_kind").alias("income"),
    )


def write_people(
    output: Path | str, rows: int, seed: int = DEFAULT_SEED, messy_rate: float = DEFAULT_MESSY_RATE
) -> None:
    """Write ``rows`` synthetic people to ``output`` (written to a temporary name, then renamed into place)."""
    if rows < 0:
        raise ValueError("rows must be >= 0")
    if not 0.0 <= messy_rate <= 1.0:
        raise ValueError("messy rate must be in [0, 1]")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    n_chunks = -(-rows // CHUNK_ROWS)
    try:
        with open(tmp, "wb") as fh:
            fh.write((",".join(COLUMNS) + "\n").encode())
            # Generate chunk k+1 (numpy, one thread) while chunk k is formatted and written (polars, GIL released).
            with ThreadPoolExecutor(max_workers=1) as pool:
                pending = pool.submit(generate_chunk, seed, 0, messy_rate) if n_chunks else None
                for k in range(n_chunks):
                    arrays = pending.result()
                    pending = pool.submit(generate_chunk, seed, k + 1, messy_rate) if k + 1 < n_chunks else None
                    take = min(CHUNK_ROWS, rows - k * CHUNK_ROWS)
                    format_chunk(arrays, take).write_csv(fh, include_header=False, line_terminator="\n")
                    del arrays
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, required=True, help="number of data rows (the header is extra)")
    ap.add_argument("--output", required=True, help="CSV path to write")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"generator seed (default {DEFAULT_SEED})")
    ap.add_argument("--messy-rate", type=float, default=DEFAULT_MESSY_RATE,
                    help="share of numeric cells made messy, and of sex cells undeclared"
                    f" (default {DEFAULT_MESSY_RATE})")
    args = ap.parse_args(argv)
    if args.rows < 0:
        ap.error("--rows must be >= 0")
    if not 0.0 <= args.messy_rate <= 1.0:
        ap.error("--messy-rate must be in [0, 1]")
    if args.seed < 0:
        ap.error("--seed must be >= 0")
    write_people(args.output, args.rows, args.seed, args.messy_rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
