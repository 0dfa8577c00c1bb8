"""Issue 23: the cost of one selection draw over 10^6 candidates (a median on a 10^6-step grid), as a ratio.

    .venv/bin/python bench/bench_selection.py            # best of 3
    .venv/bin/python bench/bench_selection.py --repeat 5

The exact bins of 10^6 uniform rows over [0, 10^6) are made once; the release's own draw
(dpcli.mechanisms.quantiles.choose: rank counts, the gaps, the draw) runs ``--repeat`` times at epsilon 1 and its
best time is printed as a ratio to discrete Laplace noise on 10^6 cells (what a 10^6-cell histogram release draws),
in the same run. Two neighbouring
bin vectors (one row moved from the middle to the top) are timed the same way: with permute-and-flip their ratio
is machine jitter around 1 (the draw's work does not depend on the data).
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction

import numpy as np

from dpcli.core.samplers import discrete_laplace
from dpcli.mechanisms import quantiles

M = 1_000_000


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = np.random.default_rng(23).integers(0, M, M)
    bins = np.bincount(rows, minlength=M).astype(np.int64).reshape(1, -1)
    moved = bins.copy()
    moved[0, M // 2 + 1] -= 1 if moved[0, M // 2 + 1] else -1
    moved[0, -1] += 1
    scale = Fraction(2)  # t = 2 * 1 / epsilon, epsilon 1, the median's utility sensitivity 1
    laplace = best(lambda: discrete_laplace(Fraction(1), M), args.repeat)
    draw = best(lambda: quantiles.choose(bins, (Fraction(1, 2),), (scale,), 1, M), args.repeat)
    other = best(lambda: quantiles.choose(moved, (Fraction(1, 2),), (scale,), 1, M), args.repeat)
    print(f"median draw over 10^6 candidates / Laplace noise on 10^6 cells: {draw / laplace:.2f}")
    print(f"neighbouring bins / bins (the same draw): {other / draw:.2f}")


if __name__ == "__main__":
    main()
