"""What every peer runner of bench_synth_quality.py shares: its arguments, the discretised data, the output.

A runner is started by the bench as ``VENV_PYTHON bench/peers/NAME.py --data D --domain J --rho R --epsilon E
--delta DELTA --rows N --seed S --out OUT``; it reads the integer codes of D (a CSV with a header) and the public
domain J ({"columns": [...], "sizes": {...}}), writes ``rows`` synthetic rows of codes to OUT (a code it could not
place, such as OpenDP's null cell, as -1) and prints one JSON object on its last stdout line: the tool's version,
how its noise is drawn, how its budget was given, and optionally "extra": {label: path} for further outputs of the
same release (another synthesis from the same fitted model: the same wall time and memory, reported as a row).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--domain", type=Path, required=True)
    parser.add_argument("--rho", type=float, required=True)
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--delta", type=float, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--algorithm", default="mst")
    return parser.parse_args()


def read_domain(path: Path) -> tuple[list[str], dict[str, int]]:
    domain = json.loads(path.read_text())
    return list(domain["columns"]), {c: int(s) for c, s in domain["sizes"].items()}


def read_codes(path: Path) -> np.ndarray:
    """The discretised data: one row per record, one int64 code per column, in the domain's column order."""
    return np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)


def write_codes(path: Path, columns: list[str], codes: np.ndarray) -> None:
    np.savetxt(path, codes.astype(np.int64), fmt="%d", delimiter=",", header=",".join(columns), comments="")


def report(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
