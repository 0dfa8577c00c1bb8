"""Issue 23, finding 4: every selection draw (a quantile level, its interval ends, top_k, mode) does work fixed by
public quantities. With a recorded keystream (a RandomSource whose ChaCha20 key is fixed, logging every request
for keystream bytes), two neighbouring datasets (scores as one row moves them) consume exactly the same CSPRNG
bytes in the same requests (rounds), for many keys: the draw's randomness use, and so its loops, do not depend on
the data. The released values may differ; the work may not.

Before permute-and-flip, the exponential mechanism's rejection sampler proposed until it accepted: the number of
proposals, and the series rounds of each acceptance test, moved with the gaps (this test failed on it)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from dpcli.core.samplers import RandomSource
from dpcli.mechanisms import quantiles, topk
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

KEYS = 12  # keystreams tried per pair


class RecordedSource(RandomSource):
    """The real CSPRNG under a fixed key, recording the size of every keystream request (one per sampler round)."""

    def __init__(self, key: int) -> None:
        self._key = key.to_bytes(32, "little")
        self.requests: list[int] = []
        super().__init__()

    def _rekey(self) -> None:
        self._encryptor = Cipher(algorithms.ChaCha20(self._key, bytes(16)), mode=None).encryptor()
        self._used = 0
        import os

        self._pid = os.getpid()

    def _fill(self, out: memoryview) -> None:
        self.requests.append(len(out))
        super()._fill(out)


def work(draw, key: int) -> list[int]:
    source = RecordedSource(key)
    draw(source)
    assert source.requests  # the draw used this source
    return source.requests


def assert_same_work(draw_d, draw_d_prime) -> None:
    for key in range(KEYS):
        assert work(draw_d, key) == work(draw_d_prime, key), key


def neighbours(m: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Bins of ``rows`` values over m candidates, and the same with one row added at the median's candidate (the
    neighbour that moves the best utility, and so every gap)."""
    rng = np.random.default_rng(seed)
    d = np.bincount(rng.integers(m // 3, 2 * m // 3, rows), minlength=m).astype(np.int64)
    d_prime = d.copy()
    d_prime[int(np.searchsorted(np.cumsum(d), rows // 2))] += 1
    return d.reshape(1, -1), d_prime.reshape(1, -1)


def test_a_quantile_draw_consumes_the_same_bytes_on_neighbours() -> None:
    d, d_prime = neighbours(400, 60, 1)
    levels, scales = (Fraction(1, 2), Fraction(9, 10)), (Fraction(1, 2), Fraction(9, 2))
    assert_same_work(lambda s: quantiles.choose(d, levels, scales, 1, 400, s),
                     lambda s: quantiles.choose(d_prime, levels, scales, 1, 400, s))


def test_interval_draws_consume_the_same_bytes_on_neighbours() -> None:
    d, d_prime = neighbours(400, 60, 2)
    values, noisy_n = np.array([[200]]), np.array([61])

    def draw(bins: np.ndarray):
        return lambda s: quantiles.intervals(bins, (Fraction(1, 2),), values, noisy_n, 3, Fraction(1, 2), 6, 1, 400,
                                             399, s)

    assert_same_work(draw(d), draw(d_prime))


SPEC = spec_text(
    {"c": "{type: category, categories: [a, b, c, d, e, f, g, h]}"},
    ["{name: top, kind: top_k, column: c, k: 3}", "{name: m, kind: mode, column: c}"],
    privacy="epsilon: 4", dataset="d",
)


def test_top_k_and_mode_draws_consume_the_same_bytes_on_neighbours() -> None:
    plan = make_plan(parse_spec(SPEC))
    d = np.array([9, 8, 8, 3, 2, 0, 0, 1])
    for shift in range(len(d)):  # one row added to each key in turn
        d_prime = d.copy()
        d_prime[shift] += 1
        for sp in plan.statistics:
            assert_same_work(lambda s, sp=sp: topk.choose(sp, d, s),
                             lambda s, sp=sp, d_prime=d_prime: topk.choose(sp, d_prime, s))


SPEC_BY = spec_text(
    {"c": "{type: category, categories: [a, b, c, d]}", "g": "{type: category, categories: [u, v, w]}"},
    ["{name: top, kind: top_k, column: c, k: 2, by: [g]}"],
    privacy="epsilon: 4", dataset="d",
)


def test_top_k_with_by_draws_consume_the_same_bytes_on_neighbours() -> None:
    (sp,) = make_plan(parse_spec(SPEC_BY)).statistics
    d = np.array([5, 4, 0, 1, 0, 0, 0, 0, 2, 2, 3, 9])  # cells of by: first, the column's keys last
    for cell in (0, 3, 5, 10):  # one row added to a (cell of by:, key), or moved there from another cell of by:
        added, moved = d.copy(), d.copy()
        added[cell] += 1
        moved[cell] += 1
        moved[(cell + 5) % len(d)] -= 1 if d[(cell + 5) % len(d)] else 0
        for d_prime in (added, moved):
            assert_same_work(lambda s: topk.choose(sp, d, s), lambda s, d_prime=d_prime: topk.choose(sp, d_prime, s))


def test_the_recorded_source_sees_a_different_draw_when_the_data_move() -> None:
    # the test can see a difference: same keystream, far-apart data, different answers for some key
    plan = make_plan(parse_spec(SPEC))
    sp = plan.statistics[1]
    answers = {(tuple(topk.choose(sp, np.array([50, 0, 0, 0, 0, 0, 0, 0]), RecordedSource(k)).tolist()),
                tuple(topk.choose(sp, np.array([0, 0, 0, 0, 0, 0, 0, 50]), RecordedSource(k)).tolist()))
               for k in range(4)}
    assert all(a != b for a, b in answers)
