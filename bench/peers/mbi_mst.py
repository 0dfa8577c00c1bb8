"""Private-PGM's reference MST (mechanisms/mst.py, McKenna et al. 2021) ported to mbi 2.0's estimation API.

What the reference does, on the bench's codes: ρ/3 on the d one-way marginals, ρ/3 on selecting d − 1 pairs
(Kruskal, each an exponential-mechanism draw at ε = √(8·(ρ/3)/(d−1)), score sensitivity 1), ρ/3 on the selected
pair marginals, each set at σ = √(3/(2ρ))·√k over its k marginals (add/remove: sensitivity 1 each); estimation by
mbi's MirrorDescent (1,000 iterations to score the pairs, 5,000 for the model), the total estimated from the
noisy marginals (never the true n). Not ported: the reference's compress_domain (merging rare categories).
Budget: the bench's ρ directly (the reference takes (ε, δ) and converts with its own cdp_rho). Noise: float
Gaussian and a Gumbel-max exponential mechanism from numpy (as the reference's np.random).
"""

from __future__ import annotations

import itertools
import math
from importlib.metadata import version

import jax

jax.config.update("jax_enable_x64", True)  # mbi's advice: float32 can stall

import numpy as np  # noqa: E402
from common import parse_args, read_codes, read_domain, report, write_codes  # noqa: E402
from mbi import Dataset, Domain, LinearMeasurement, estimation  # noqa: E402


def measure(data: Dataset, cliques: list[tuple[str, ...]], rho: float, rng: np.random.Generator
            ) -> list[LinearMeasurement]:
    sigma = math.sqrt(len(cliques) / (2 * rho))
    out = []
    for clique in cliques:
        exact = np.asarray(data.project(clique).datavector())
        out.append(LinearMeasurement(exact + rng.normal(0, sigma, exact.size), clique, sigma))
    return out


def select(data: Dataset, rho: float, one_way: list[LinearMeasurement], rng: np.random.Generator
           ) -> list[tuple[str, str]]:
    model = estimation.MirrorDescent().estimate(data.domain, one_way, iters=1000)
    attrs = list(data.domain.attributes)
    candidates = list(itertools.combinations(attrs, 2))
    scores = {
        (a, b): float(np.abs(np.asarray(data.project([a, b]).datavector())
                             - np.asarray(model.project([a, b]).datavector())).sum())
        for a, b in candidates
    }
    component = {a: a for a in attrs}

    def root(a: str) -> str:
        while component[a] != a:
            a = component[a]
        return a

    rounds = len(attrs) - 1
    epsilon = math.sqrt(8 * rho / rounds)
    chosen = []
    for _ in range(rounds):
        open_pairs = [e for e in candidates if root(e[0]) != root(e[1])]
        q = np.array([scores[e] for e in open_pairs])
        # the exponential mechanism at ε with sensitivity 1: argmax of ε/2·q + Gumbel
        pick = open_pairs[int(np.argmax(epsilon / 2 * q + rng.gumbel(size=q.size)))]
        component[root(pick[0])] = root(pick[1])
        chosen.append(pick)
    return chosen


def main() -> None:
    args = parse_args()
    columns, sizes = read_domain(args.domain)
    codes = read_codes(args.data)
    domain = Domain.fromdict({c: sizes[c] for c in columns})
    data = Dataset({c: codes[:, i] for i, c in enumerate(columns)}, domain)
    rng = np.random.default_rng(args.seed)
    np.random.seed(args.seed)  # mbi's sampling draws from np.random
    one_way = measure(data, [(c,) for c in columns], args.rho / 3, rng)
    pairs = select(data, args.rho / 3, one_way, rng)
    measured = one_way + measure(data, pairs, args.rho / 3, rng)
    model = estimation.MirrorDescent().estimate(domain, measured, iters=5000)
    synthetic = model.synthetic_data(rows=args.rows)
    write_codes(args.out, columns, np.column_stack([np.asarray(synthetic.data[c]) for c in columns]))
    report(version=f"mbi {version('mbi')} (reference MST port)", noise="float (numpy Gaussian, Gumbel-max)",
           budget=f"ρ = {args.rho:.6g} (ρ/3 one-way, select, measure)")


if __name__ == "__main__":
    main()
