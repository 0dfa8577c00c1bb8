"""Throughput of dpcli's exact samplers, and of OpenDP's exact samplers when opendp is importable.

    python bench/bench_samplers.py                 # 10**6 draws per call, best of 3
    python bench/bench_samplers.py --size 10000000
    bash bench/opendp_venv.sh                      # same script in .bench-venv, with opendp installed

Prints draws per second for discrete_laplace(scale) and discrete_gaussian(sigma**2 = scale**2) at scales
1, 10, 1000 and 10**6 (one core: numpy here does not use threads). With opendp, the same vector size goes
through OpenDP's vector Laplace / Gaussian measurements on integers (its exact samplers, CKS 2020) and the
ratio ours/theirs is printed. OpenDP's time includes turning the Python list into a Rust vector and back.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from fractions import Fraction
from functools import partial

from dpcli.core.samplers import RandomSource, discrete_gaussian, discrete_laplace

SCALES = [1, 10, 1000, 10**6]
TARGET = 3_000_000


def best_of(repeat: int, fn) -> tuple[float, float]:
    """(best wall-clock seconds, best CPU seconds of this process) over ``repeat`` calls."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        c1, w1 = time.process_time(), time.perf_counter()
        wall, cpu = min(wall, w1 - w0), min(cpu, c1 - c0)
    return wall, cpu


def opendp_measurements():
    """{(kind, scale): callable producing one noisy vector of zeros}, or None without opendp."""
    try:
        import opendp.prelude as dp
    except ImportError:
        return None, None
    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    made = {}
    for scale in SCALES:
        made[("laplace", scale)] = dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=float(scale))
        made[("gaussian", scale)] = dp.m.make_gaussian(domain, dp.l2_distance(T="i64"), scale=float(scale))
    from importlib.metadata import version

    return made, version("opendp")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1_000_000, help="draws per call (default 10**6)")
    parser.add_argument("--repeat", type=int, default=3, help="calls per measurement; the best is kept")
    parser.add_argument("--no-opendp", action="store_true", help="skip OpenDP even if it is importable")
    args = parser.parse_args(argv)

    source = RandomSource()
    theirs, version = (None, None) if args.no_opendp else opendp_measurements()
    zeros = [0] * args.size if theirs else None
    print(f"draws per call: {args.size:,}; best of {args.repeat}; target >= {TARGET:,} draws/s on one core")
    print("wall = draws per wall-clock second; cpu = draws per CPU second of this process (robust to a busy machine)")
    header = f"{'sampler':<9} {'scale':>9} {'dpcli wall':>12} {'dpcli cpu':>12}"
    if theirs:
        header += f" {'OpenDP ' + version + ' wall':>19} {'OpenDP cpu':>11} {'ratio (cpu)':>11}"
    print(header)
    missed = []
    for kind, sampler in (("laplace", discrete_laplace), ("gaussian", discrete_gaussian)):
        for scale in SCALES:
            param = Fraction(scale) if kind == "laplace" else Fraction(scale) ** 2
            wall, cpu = best_of(args.repeat, partial(sampler, param, args.size, source))
            line = f"{kind:<9} {scale:>9,} {args.size / wall:>12,.0f} {args.size / cpu:>12,.0f}"
            if args.size / wall < TARGET:
                missed.append((kind, scale))
            if theirs:
                meas = theirs[(kind, scale)]
                their_wall, their_cpu = best_of(args.repeat, partial(meas, zeros))
                line += f" {args.size / their_wall:>19,.0f} {args.size / their_cpu:>11,.0f} {their_cpu / cpu:>10.0f}x"
            print(line, flush=True)
    if theirs is None and not args.no_opendp:
        print("(opendp is not importable here: run bench/opendp_venv.sh for the comparison)")
    if missed:
        where = ", ".join(f"{k} at {s}" for k, s in missed)
        print(f"below target (wall clock): {where}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
