"""Exact discrete Laplace and discrete Gaussian noise, vectorised, fed by a ChaCha20 CSPRNG.

Why exact integer noise
-----------------------
Textbook Laplace or Gaussian noise drawn in floating point leaks the true value through the pattern of
low-order bits of the result (Mironov, "On significance of the least significant bits for differential
privacy", CCS 2012). dpcli therefore only adds *integer* noise whose distribution is exactly the stated
one: every random decision below is a comparison between uniformly random integers and exact integer
thresholds. No float is ever formed on the sampling path, so there is nothing to round.

Algorithms
----------
Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020
(arXiv:2004.00010), Algorithms 1-3, with the vectorised realisation described here.

Uniform integers (``RandomSource.integers_below``). A 64-bit word ``w`` is split as ``w = q*M + u``.
Words with ``q*M > 2**64 - M`` (the incomplete last block) are rejected and redrawn, so every
``u`` in ``[0, M)`` comes from exactly ``floor(2**64 / M)`` words: exactly uniform, no modulo bias.

Bernoulli(p) for rational ``p = r/M``: ``u < r`` with ``u`` uniform in ``[0, M)``. Exact.

Bernoulli(exp(-x)), ``0 <= x = r/M <= 1`` (CKS Algorithm 1, the series trick): for ``K = 1, 2, ...``
draw ``A_K ~ Bernoulli(x/K)`` (that is ``u < r`` with ``u`` uniform in ``[0, M*K)``) until the first
``A_K = 0``; return ``K odd``. Since ``P(K > k) = x**k / k!``, ``P(K odd) = sum_j (-x)**j / j! = exp(-x)``.
When ``M*K`` would exceed ``2**63`` the draw is split into ``Bernoulli(r/M) and Bernoulli(1/K)``,
whose product is the same probability.

Bernoulli(exp(-1)) is the same series with ``x = 1``, where ``P(K > k) = 1/k!`` is rational. ``K`` is
drawn by inversion from ONE uniform ``u`` in ``[0, 9!)``: ``K > k`` iff ``u < 9!/k!``, an event of
probability exactly ``1/k!`` for ``k <= 9``; the lanes with ``K > 9`` (``u == 0``) continue the series
with ``Bernoulli(1/10)``, ``Bernoulli(1/11)``, ... Same distribution as drawing the ``A_K`` one by one.

Bernoulli(exp(-gamma)) for ``gamma = num/den > 1``: ``floor(gamma)`` independent Bernoulli(exp(-1)) and
one Bernoulli(exp(-(gamma - floor(gamma)))); the product of their success probabilities is exp(-gamma).
This keeps every integer in a round below ``2**63``.

Geometric, ``P(k) = (1-q) q**k`` with ``q = exp(-s/t)`` (the core of CKS Algorithm 2): draw ``U``
uniform in ``[0, t)`` and keep it with probability ``exp(-U/t)`` (else redraw ``U``); draw ``V``, the
number of Bernoulli(exp(-1)) successes before the first failure; ``X = U + t*V`` is then geometric with
ratio ``exp(-1/t)`` and ``floor(X/s)`` geometric with ratio ``exp(-s/t)``.

Discrete Laplace, ``P(x) ~ exp(-|x|/scale)``, ``scale = t/s`` (CKS Algorithm 2): ``Y`` geometric with
ratio ``exp(-s/t)``, ``B`` a fair random bit; reject ``(B = 1, Y = 0)`` (which would count zero twice) and
redraw, else return ``(1 - 2B) Y``.

Discrete Gaussian, ``P(x) ~ exp(-x**2 / (2 sigma**2))`` (CKS Algorithm 3): draw ``Y`` from the discrete
Laplace with scale ``t``; accept with probability ``exp(-(|Y| - sigma**2/t)**2 / (2 sigma**2))``, else redraw.
The ratio target/proposal is ``exp(-(|Y| - sigma**2/t)**2 / (2 sigma**2)) * exp(sigma**2 / (2 t**2))``
for *any* ``t > 0``, so the output is exact whatever ``t`` is; ``t`` only sets the acceptance rate.
CKS take ``t = floor(sigma) + 1``. We instead fix ``mu = sigma**2 / t`` to ``m/d`` with small integers
(``m = floor(sigma), d = 1`` when ``sigma >= 1``; ``m = 1, d`` the least power of two with
``d*sigma >= 1`` otherwise), so ``t = sigma**2 d / m`` lies in ``[sigma, 2 sigma)`` and the exponent is
``gamma = (d|Y| - m)**2 * b / (2 a d**2)`` for ``sigma**2 = a/b``: an integer square times a fixed
rational, ``gamma = N / bd`` with ``bd <= 2**51``, so ``N < 2**63`` for every proposal with
``gamma < 2**12``; the others, accepted with probability below ``exp(-4000)``, are decided exactly
with Python integers.

Selection: permute-and-flip (McKenna & Sheldon 2020)
----------------------------------------------------
``exponential_choice`` / ``exponential_sample`` / ``permute_and_flip`` pick an index of integer scores: visit the m
candidates in a uniformly random order, release the first accepted, candidate i accepted with probability
exp(-(num/den) gap_i), gap_i = best - score_i (the best is always accepted: no failure, no delta). Realised with work
fixed by m and num/den: every candidate gets one flip G_i, P(G_i >= g) = exp(-g num/den) (the exact geometric sampler
above, with ratio exp(-num/den)), and one 63-bit order key (iid uniform, the whole row redrawn on a tie, so the key
order is an exactly uniform permutation); the answer is the accepted candidate (G_i >= gap_i) with the least key,
decided by whole-array comparisons after every flip is drawn. The gaps are int64 saturated at GAP_CAP = 2**62: a flip
reaches it only with probability below exp(-2**13) at any temperature the plan allows (then OverflowError, whatever
the gaps), so saturation changes no draw. Pure eps-DP at the exponential mechanism's temperature (2 D / eps; D / eps
for a monotone utility), expected utility at least the exponential mechanism's; not claimed eps-bounded-range.

The exponential mechanism, exact (``exponential_mechanism``; synthetic data's selections)
----------------------------------------------------------------------------------------
``exponential_mechanism(gaps, num, den)`` returns index i with probability exactly proportional to
exp(-(num/den) gap_i): the exponential mechanism's own law, which permute-and-flip's is not. Why it exists beside
permute-and-flip: the exponential mechanism at rate eps / (2 D) (utility of sensitivity D) is eps-bounded-range,
hence eps**2/8-zCDP (Durfee & Rogers 2019; Cesar & Rogers 2021), a quarter of the eps**2/2 that a pure eps-DP draw
costs; MST selects d - 1 pairs and is charged that way. The bound needs the exact law, so the draw is exact:
rejection sampling with a uniform proposal. A trial is a uniform index J (``integers_below``) and one flip G
(``_flips``: P(G >= g) = exp(-g num/den)); it is accepted iff G >= gaps[J], which has probability
exp(-(num/den) gaps[J]); the answer is J of the first accepted trial. Trials are iid, so the first accepted J has
P(J = i | accepted) proportional to (1/m) exp(-(num/den) gap_i): exactly the law. Work fixed by m = len(gaps) and
num/den, never by the gaps: the trials come in batches of B = 45 m, every trial of a batch is drawn and flipped
(the index draws and the flips each use work set by their own random bits), and the acceptances and the first of
them are whole-array operations. A 0 gap (required) is accepted whenever it is proposed, so a batch has no accepted
trial with probability at most (1 - 1/m)**B <= exp(-45) < 2**-64; only then is another batch drawn, the one
data-dependent extra work (as the rare fallbacks above, stated, not hidden). Gaps saturate at GAP_CAP as for
permute-and-flip (never accepted unless num = 0). ``exponential_mechanism_sample`` draws many independent indices
(the tests and the audit) from the same trials, kept in trial order, without the fixed batches.

Vectorisation
-------------
Every loop is over *rounds*; a round processes all still-undecided draws of the vector with numpy
(one keystream call per round). Where a round needs several uniforms per lane (``U`` and the first
series round; two Bernoulli(exp(-1)) trials), they are the mixed-radix digits of ONE uniform integer in
``[0, r_1 * r_2 * ...)`` (product ``<= 2**63``): that map is a bijection onto ``[0, r_1) x [0, r_2) x ...``,
so the digits are independent and exactly uniform. A rejection loop proposes a batch of iid trials
(a little more than still needed, sized from the acceptance counts so far) and keeps the first
accepted ones in trial order; acceptance is decided independently per trial, so the kept values are
iid from the target, exactly as when running the algorithm one draw at a time. Large vectors are
sampled in passes of ``_CHUNK`` lanes so the working set stays in cache. The only per-draw Python code
is the huge-exponent case of the Gaussian above.

Timing side channel (what is and is not protected)
--------------------------------------------------
Protected: the sampler never sees the data, so its running time is a function of the noise randomness
only. All cells of a call are sampled together, so nothing per cell is observable: every loop is a
round over the whole still-active vector, the number of rounds of each rejection loop is set by
acceptance *counts* (independent of the accepted values), and the total time is, up to machine
jitter, a sum over all lanes (kept, rejected and surplus trials) of their round counts. One cell's
noise value moves that sum by a few rounds of one lane, against a total of order ``size`` rounds whose
natural spread is of order ``sqrt(size)``. So that a one-cell release is not its own timing oracle,
``discrete_laplace`` and ``discrete_gaussian`` always sample at least ``_MIN_BATCH`` = 1024 lanes and
return the first ``size`` (the decoys' work is counted, their values discarded).
Selection draws (permute-and-flip; the exponential mechanism but for its extra batch of probability below 2**-64)
are stronger: their keystream use and rounds are a function of m, k and the temperature and of the random bits only
(every candidate, or trial, is flipped, whatever its gap; the gaps only enter whole-array comparisons);
``tests/mechanisms/test_selection_work.py`` and ``tests/core/test_exponential_mechanism.py`` check that neighbouring
datasets consume the same bytes.
Not protected: the total is still a (weak, statistical) function of the multiset of noise values, e.g.
a large ``|noise|`` costs its lane more geometric rounds, so someone timing many repeated releases
could average; a co-located attacker with cache, branch-predictor or power side channels (numpy and
OpenSSL are not constant-time with respect to these values); and the Python fallback for huge
Gaussian proposals, whose longer run only reveals that a proposal of probability below ``exp(-4000)``
was drawn (and almost surely rejected).

Randomness
----------
All bits come from :class:`RandomSource`: the ChaCha20 keystream (OpenSSL via ``cryptography``) under
a 256-bit key and 96-bit nonce from ``os.urandom``, re-keyed in a forked child (``os.register_at_fork``,
and a PID check on every call) and every 64 GiB. No other generator is used.
"""

from __future__ import annotations

import math
import operator
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from fractions import Fraction
from numbers import Integral
from typing import NoReturn

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

__all__ = [
    "GAP_CAP",
    "RandomSource",
    "bernoulli_exp",
    "default_source",
    "discrete_gaussian",
    "discrete_laplace",
    "exponential_choice",
    "exponential_mechanism",
    "exponential_mechanism_sample",
    "exponential_sample",
    "geometric_exp",
    "permute_and_flip",
    "saturated_gaps",
]

_TWO64 = 1 << 64
_TWO63 = 1 << 63
_I64_MAX = _TWO63 - 1
#: Largest numerator or denominator accepted for a scale, sigma**2 or a geometric_exp ratio.
MAX_PARAM = 1 << 48
#: discrete_laplace / discrete_gaussian sample at least this many lanes (see "Timing side channel").
_MIN_BATCH = 1024

_U64_ONE = np.uint64(1)


# --------------------------------------------------------------------------------------------------
# CSPRNG
# --------------------------------------------------------------------------------------------------


class RandomSource:
    """Cryptographically secure random words: the ChaCha20 keystream (OpenSSL) with a fresh key.

    The key (32 bytes) and nonce (12 bytes; the 4-byte block counter starts at 0) come from
    ``os.urandom``. A child process never continues its parent's stream: every call compares
    ``os.getpid()`` with the PID that created the key and re-keys on a mismatch. The stream is also
    re-keyed every ``2**36`` bytes, far below ChaCha20's ``2**38``-byte counter limit. Calls are
    serialised by a lock. Instances cannot be pickled or copied (a copy would repeat the stream).
    """

    _REKEY_BYTES = 1 << 36
    _STEP = 1 << 20  # keystream bytes per OpenSSL call

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zeros = bytes(self._STEP)
        self._rekey()
        _LIVE_SOURCES.add(self)

    def _rekey(self) -> None:
        key = os.urandom(32)
        nonce = bytes(4) + os.urandom(12)
        self._encryptor = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
        self._pid = os.getpid()
        self._used = 0

    def __reduce__(self) -> NoReturn:  # pickle, copy.copy and copy.deepcopy all go through here
        raise TypeError("a RandomSource cannot be pickled or copied: the copy would repeat its stream")

    def _fill(self, out: memoryview) -> None:
        """Overwrite the writable byte buffer ``out`` with fresh keystream."""
        total = len(out)
        with self._lock:
            if self._pid != os.getpid():
                self._rekey()
            pos = 0
            zeros = memoryview(self._zeros)
            while pos < total:
                if self._used >= self._REKEY_BYTES:
                    self._rekey()
                step = min(self._STEP, total - pos, self._REKEY_BYTES - self._used)
                # Encrypting zeros yields the keystream itself.
                self._encryptor.update_into(zeros[:step], out[pos : pos + step])
                self._used += step
                pos += step

    def random_bytes(self, n: int) -> bytes:
        """``n`` uniformly random bytes."""
        n = _as_count(n, "n")
        buf = bytearray(n)
        if n:
            self._fill(memoryview(buf))
        return bytes(buf)

    def uint64(self, n: int) -> np.ndarray:
        """``n`` independent uniform ``uint64`` words (a new, writable array)."""
        n = _as_count(n, "n")
        out = np.empty(n, dtype=np.uint64)
        if n:
            self._fill(out.view(np.uint8).data)
        return out

    def integers_below(self, bound: npt.ArrayLike, size: int | Sequence[int] | None = None) -> np.ndarray:
        """Exactly uniform integers in ``[0, bound)`` as ``int64``, by rejection (no modulo bias).

        ``bound`` is an int or an array of ints, each in ``[1, 2**63)``. With ``size`` the bound is
        broadcast to that shape; without it the result has the shape of ``bound``.
        """
        b = _int_array(bound, "bound")
        if b.size and (int(b.min()) < 1 or int(b.max()) > _I64_MAX):
            raise ValueError("every bound must be in [1, 2**63)")
        if size is not None:
            shape = (_as_count(size, "size"),) if isinstance(size, int | Integral) else tuple(size)
            b = np.broadcast_to(b, shape)
        shape = b.shape
        flat = np.ascontiguousarray(b, dtype=np.uint64).reshape(-1)
        if flat.size == 0:
            return np.zeros(shape, dtype=np.int64)
        first = int(flat[0])
        out = _below_scalar(self, first, flat.size) if np.all(flat == flat[0]) else _below_array(self, flat)
        return out.view(np.int64).reshape(shape)


_LIVE_SOURCES: weakref.WeakSet[RandomSource] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A fresh lock (the parent's may have been held by another thread at fork time) and a fresh key. The
    # PID check in _fill covers forks that bypass these hooks.
    for source in list(_LIVE_SOURCES):
        source._lock = threading.Lock()
        source._rekey()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_default: RandomSource | None = None
_default_lock = threading.Lock()


def default_source() -> RandomSource:
    """The process-wide source, created on first use (and re-keyed by itself in a forked child)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = RandomSource()
    return _default


# --------------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------------


def _as_count(n: object, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, Integral):
        raise TypeError(f"{name} must be an int")
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"{name} must be >= 0")
    return n


def _int_array(x: object, name: str) -> np.ndarray:
    """An integer array from an int or array-like of ints, refusing floats, bools and objects."""
    if isinstance(x, (bool, float, complex, Fraction)):
        raise TypeError(f"{name} must be integers")
    if isinstance(x, Integral):
        x = int(x)
        if not -_TWO63 <= x < _TWO64:
            raise ValueError(f"{name} is out of range")
        return np.array(x, dtype=np.uint64 if x >= _TWO63 else np.int64)
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iu":
            return x
        if x.size == 0:
            return x.astype(np.int64)
        raise TypeError(f"{name} must be integers")
    # A nested list or tuple: look at the Python values themselves (numpy would turn [5, 2**63] into floats).
    arr = np.asarray(x, dtype=object)
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.int64)
    vals = list(arr.flat)
    if not all(isinstance(v, Integral) and not isinstance(v, bool) for v in vals):
        raise TypeError(f"{name} must be integers")
    vals = [int(v) for v in vals]
    if min(vals) < -_TWO63 or max(vals) >= _TWO64:
        raise ValueError(f"{name} is out of range")
    return np.array(vals, dtype=np.uint64 if max(vals) >= _TWO63 else np.int64).reshape(arr.shape)


def _rational_param(value: Fraction | int, name: str) -> tuple[int, int]:
    """(numerator, denominator) of a positive rational with both parts <= 2**48."""
    if isinstance(value, bool) or not isinstance(value, (Fraction, Integral)):
        raise TypeError(f"{name} must be a Fraction or an int, not {type(value).__name__}")
    value = Fraction(value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0")
    if value.numerator > MAX_PARAM or value.denominator > MAX_PARAM:
        raise ValueError(f"{name} needs numerator and denominator <= 2**48 (round it up before calling)")
    return value.numerator, value.denominator


# --------------------------------------------------------------------------------------------------
# vectorised building blocks (all take the source first; arrays are 1-d)
# --------------------------------------------------------------------------------------------------


def _below_scalar(src: RandomSource, bound: int, n: int) -> np.ndarray:
    """``n`` exactly uniform uint64 in ``[0, bound)`` for one Python-int bound, ``1 <= bound <= 2**63``."""
    if bound == 1:
        return np.zeros(n, dtype=np.uint64)
    m = np.uint64(bound)
    # A word w = q*bound + u is kept iff q < floor(2**64 / bound): each u then has the same number of words.
    q_lim = np.uint64(_TWO64 // bound)
    w = src.uint64(n)
    q = w // m
    out: np.ndarray = w - q * m
    redo = np.flatnonzero(q >= q_lim)
    while redo.size:
        w = src.uint64(redo.size)
        q = w // m
        ok = q < q_lim
        out[redo[ok]] = w[ok] - q[ok] * m
        redo = redo[~ok]
    return out


def _below_array(src: RandomSource, bound: np.ndarray) -> np.ndarray:
    """One exactly uniform uint64 in ``[0, bound[i])`` per lane; uint64 bounds, each ``>= 1``."""
    w = src.uint64(bound.size)
    out: np.ndarray = w % bound
    # Keep w iff its block start w - u satisfies (w - u) + bound <= 2**64, i.e. w - u <= ~bound + 1.
    redo = np.flatnonzero((w - out) > (~bound + _U64_ONE))
    while redo.size:
        b = bound[redo]
        w = src.uint64(redo.size)
        u = w % b
        ok = (w - u) <= (~b + _U64_ONE)
        out[redo[ok]] = u[ok]
        redo = redo[~ok]
    return out


# Several independent uniform draws are cut from ONE uniform integer: w uniform in [0, r_1 * ... * r_J) is, in mixed
# radix, the tuple (w mod r_1, (w // r_1) mod r_2, ...), and that map is a bijection onto [0, r_1) x ... x [0, r_J),
# so the digits are independent and exactly uniform. This saves keystream and, above all, rounds.
_MAX_DIGITS = 2  # measured: more digits cost more numpy work than the rounds they save


def _digits(src: RandomSource, radices: list[int], n: int) -> list[np.ndarray]:
    """For each radix r_j, ``n`` independent uniform uint64 in ``[0, r_j)``; the product must be ``<= 2**63``."""
    w = _below_scalar(src, math.prod(radices), n)
    out = []
    for r in radices[:-1]:
        ru = np.uint64(r)
        q = w // ru
        out.append(w - q * ru)
        w = q
    out.append(w)
    return out


def _series_radices(den: int, k: int, lead: int = 1) -> list[int]:
    """Moduli ``den*k, den*(k+1), ...`` of the next series rounds, as many (<= _MAX_DIGITS) as fit with ``lead``."""
    radices: list[int] = []
    prod = lead
    while len(radices) < _MAX_DIGITS and prod * den * k <= _TWO63:
        radices.append(den * k)
        prod *= den * k
        k += 1
    return radices


def _series_step(succ: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rounds k, k+1, ... of CKS Algorithm 1 given their outcomes ``succ`` (A_k, A_{k+1}, ...).

    Returns (result, more): where ``more`` is False the series stopped at ``K = k + (leading successes)``
    and ``result`` is ``K odd``; where ``more`` is True every round succeeded and the series goes on.
    """
    prefix = succ[0].copy()
    parity = prefix.copy()  # parity of the number of leading successes
    for a in succ[1:]:
        prefix &= a
        parity ^= prefix
    return (parity ^ bool(k & 1)), prefix


def _bern_exp_frac(src: RandomSource, r: np.ndarray, den: int, k: int = 1) -> np.ndarray:
    """Bernoulli(exp(-r/den)) per lane, ``0 <= r <= den`` (uint64, one Python-int den): CKS Algorithm 1.

    With ``k > 1`` the series is continued from round k, for lanes whose rounds 1..k-1 all succeeded.
    Round j succeeds with probability ``x/j`` (``x = r/den``): ``u < r`` for ``u`` uniform in ``[0, den*j)``.
    """
    result = np.empty(r.size, dtype=bool)
    idx = np.arange(r.size)
    rr = r
    while idx.size:
        radices = _series_radices(den, k)
        if radices:
            succ = [u < rr for u in _digits(src, radices, idx.size)]
        else:  # den*k > 2**63: Bernoulli(r/den) and Bernoulli(1/k), the same probability without overflow
            succ = [(_below_scalar(src, den, idx.size) < rr) & (_below_scalar(src, k, idx.size) == 0)]
        res, more = _series_step(succ, k)
        result[idx] = res
        go = np.flatnonzero(more)
        idx = idx[go]
        rr = rr[go]
        k += len(succ)
    return result


def _bern_exp_frac_lanes(src: RandomSource, r: np.ndarray, den: np.ndarray) -> np.ndarray:
    """As _bern_exp_frac with one denominator per lane (uint64 arrays), one round at a time."""
    result = np.empty(r.size, dtype=bool)
    idx = np.arange(r.size)
    rr = r
    dd = den
    k = 1
    while idx.size:
        small = dd <= np.uint64(_TWO63 // k)
        if small.all():
            a = _below_array(src, dd * np.uint64(k)) < rr
        else:
            a = _below_array(src, np.where(small, dd * np.uint64(k), dd)) < rr
            a &= small | (_below_scalar(src, k, idx.size) == 0)
        result[idx[np.flatnonzero(~a)]] = bool(k & 1)
        go = np.flatnonzero(a)
        idx = idx[go]
        rr = rr[go]
        dd = dd[go]
        k += 1
    return result


_F9 = math.factorial(9)
# u uniform in [0, 9!): "K > k" iff u < 9!/k!, an event of probability exactly 1/k! (k <= 9).
_E1_THRESHOLDS = [np.uint64(_F9 // math.factorial(k)) for k in range(2, 10)]  # k = 2..9, decreasing; last is 1
_E1_ASCENDING = np.array(sorted(int(t) for t in _E1_THRESHOLDS), dtype=np.uint64)
_E1_T2, _E1_T3, _E1_T4, _E1_T5 = _E1_THRESHOLDS[:4]
_E1_PER_WORD = 2  # Bernoulli(exp(-1)) draws per word in loops that need several ((9!)**3 < 2**63 would allow 3)


def _e1_decide(src: RandomSource, u: np.ndarray) -> np.ndarray:
    """Bernoulli(exp(-1)) from u uniform in [0, 9!): CKS Algorithm 1 with x = 1, its stopping index by inversion."""
    # K = 2 + #{k in 2..9 : u < 9!/k!} when u >= 1; success iff K odd, i.e. iff that count is odd.
    odd = (u < _E1_T2) ^ (u < _E1_T3) ^ (u < _E1_T4) ^ (u < _E1_T5)
    deep = np.flatnonzero(u < _E1_T5)  # K > 5 (probability 1/120): count every threshold
    if deep.size:
        ud = u[deep]
        count = _E1_ASCENDING.size - np.searchsorted(_E1_ASCENDING, ud, side="right")
        odd[deep] = (count & 1).astype(bool)
        tail = deep[ud == 0]  # K > 9 (probability 1/9!): continue the series with Bernoulli(1/10), ...
        if tail.size:
            odd[tail] = _bern_exp_frac(src, np.ones(tail.size, dtype=np.uint64), 1, k=10)
    return odd


def _bern_exp1(src: RandomSource, n: int, per_lane: int = 1) -> list[np.ndarray]:
    """``per_lane`` independent arrays of ``n`` Bernoulli(exp(-1)) (up to three per random word)."""
    return [_e1_decide(src, u) for u in _digits(src, [_F9] * per_lane, n)]


def _bern_exp_int_then(src: RandomSource, alive: np.ndarray, g: np.ndarray) -> None:
    """In place: ``alive[i] &=`` (``g[i]`` independent Bernoulli(exp(-1)) all succeed); g int64 >= 0."""
    idx = np.flatnonzero(alive & (g > 0))
    done = 0
    while idx.size:
        need = g[idx] - done  # >= 1
        b = _bern_exp1(src, idx.size, _E1_PER_WORD)
        ok = b[0]
        for j in range(1, _E1_PER_WORD):
            ok &= b[j] | (need <= j)
        alive[idx[np.flatnonzero(~ok)]] = False
        done += _E1_PER_WORD
        idx = idx[np.flatnonzero(ok & (need > _E1_PER_WORD))]


def _bern_exp_vec(src: RandomSource, num: np.ndarray, den: int | np.ndarray) -> np.ndarray:
    """Bernoulli(exp(-num/den)) per lane; num int64 >= 0; den a Python int or an int64 array (>= 1)."""
    g = num // den
    r = (num - g * den).view(np.uint64)
    if isinstance(den, np.ndarray):
        res = _bern_exp_frac_lanes(src, r, den.view(np.uint64))
    else:
        res = _bern_exp_frac(src, r, int(den))
    _bern_exp_int_then(src, res, g)
    return res


def _geometric_e1(src: RandomSource, n: int) -> np.ndarray:
    """Number of Bernoulli(exp(-1)) successes before the first failure: P(V = v) = (1 - 1/e) e**-v."""
    v = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    while idx.size:
        b = _bern_exp1(src, idx.size, _E1_PER_WORD)
        prefix = b[0].copy()
        run = prefix.astype(np.int64)
        for a in b[1:]:
            prefix &= a
            run += prefix
        v[idx] += run
        idx = idx[np.flatnonzero(prefix)]  # every trial of this round succeeded: keep counting
    return v


def _collect_accepted(n: int, propose: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """``n`` accepted values of a rejection sampler, ``propose(m) -> (values, accepted)`` for ``m`` iid trials.

    Each round proposes more trials than needed (sized from the acceptance counts seen so far, integers
    only) and keeps the first accepted ones in trial order. Trials are iid and each is accepted
    independently of the others, so the accepted values, in order, are iid draws from the target and
    which of them are kept depends only on positions, never on values. Rounds are few: usually one.
    """
    out = np.empty(n, dtype=np.int64)
    filled = proposed = accepted = 0
    while filled < n:
        need = n - filled
        m = min(need * proposed // accepted + need // 8, 16 * need) + 64 if accepted else need + need // 2 + 64
        values, ok = propose(m)
        good = np.flatnonzero(ok)
        proposed += m
        accepted += good.size
        good = good[:need]
        out[filled : filled + good.size] = values[good]
        filled += good.size
    return out


def _accepted_u(src: RandomSource, t: int, n: int) -> np.ndarray:
    """``n`` draws of U uniform in [0, t) kept with probability exp(-U/t) (int64): P(U=u) ~ exp(-u/t).

    One random word gives U and the first rounds of its Bernoulli(exp(-U/t)) when they fit.
    """
    if t == 1:
        return np.zeros(n, dtype=np.int64)
    radices = _series_radices(t, 1, lead=t)

    def propose(m: int) -> tuple[np.ndarray, np.ndarray]:
        if not radices:
            u = _below_scalar(src, t, m)
            return u.view(np.int64), _bern_exp_frac(src, u, t)
        digits = _digits(src, [t, *radices], m)
        u = digits[0]
        keep, more = _series_step([d < u for d in digits[1:]], 1)
        cont = np.flatnonzero(more)
        if cont.size:
            keep[cont] = _bern_exp_frac(src, u[cont], t, k=1 + len(radices))
        return u.view(np.int64), keep

    return _collect_accepted(n, propose)


def _geometric(src: RandomSource, t: int, s: int, n: int) -> np.ndarray:
    """``n`` draws with P(k) = (1 - q) q**k, q = exp(-s/t), k >= 0 (int64); t, s < 2**52."""
    u = _accepted_u(src, t, n)
    v = _geometric_e1(src, n)
    if n and int(v.max()) > (_I64_MAX - (t - 1)) // t:  # probability below exp(-2**11)
        raise OverflowError("a geometric draw does not fit in int64")
    x: np.ndarray = u + v * t
    return x // s if s != 1 else x


def _random_bits(src: RandomSource, n: int) -> np.ndarray:
    raw = np.frombuffer(src.random_bytes((n + 7) // 8), dtype=np.uint8)
    return np.unpackbits(raw, count=n).view(bool)


def _signed_geometric(src: RandomSource, t: int, s: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` trials of CKS Algorithm 2: ``(1 - 2B) Y`` and whether the trial is kept (not ``B = 1, Y = 0``)."""
    y = _geometric(src, t, s, m)
    neg = _random_bits(src, m)
    keep = ~(neg & (y == 0))  # "-0" is rejected, so that 0 is not counted twice
    np.negative(y, out=y, where=neg)
    return y, keep


def _laplace(src: RandomSource, t: int, s: int, n: int) -> np.ndarray:
    """``n`` discrete Laplace draws with scale t/s (CKS Algorithm 2), int64."""
    return _collect_accepted(n, lambda m: _signed_geometric(src, t, s, m))


def _gaussian(src: RandomSource, a: int, b: int, n: int) -> np.ndarray:
    """``n`` discrete Gaussian draws with sigma**2 = a/b (CKS Algorithm 3, t as in the module docstring)."""
    # mu = sigma**2 / t = m/d; t = sigma**2 * d / m.
    if a >= b:
        d, m = 1, math.isqrt(a // b)  # floor(sigma) >= 1
    else:
        m, d = 1, 1
        while d * d * a < b:  # least power of two with d * sigma >= 1
            d *= 2
    t_frac = Fraction(a * d, b * m)
    lt, ls = t_frac.numerator, t_frac.denominator
    beta = Fraction(b, 2 * a * d * d)  # gamma = (d|Y| - m)**2 * beta
    bn, bd = beta.numerator, beta.denominator
    c_max = math.isqrt(_I64_MAX // bn)  # |c| <= c_max  =>  c*c*bn < 2**63
    z_max = (c_max + m) // d  # z <= z_max  =>  |d*z - m| <= c_max, and d*z does not overflow

    def propose(count: int) -> tuple[np.ndarray, np.ndarray]:
        # One Laplace trial and the Gaussian acceptance in a single rejection step: accepted iff the
        # Laplace trial is kept AND Bernoulli(exp(-gamma)) succeeds, so accepted values follow
        # Laplace(y) * exp(-gamma(y)), which is proportional to the discrete Gaussian.
        y, keep = _signed_geometric(src, lt, ls, count)
        lanes = np.flatnonzero(keep)
        z = np.abs(y[lanes])
        c = np.minimum(z, z_max) * d - m
        accept = _bern_exp_vec(src, c * c * bn, bd)
        for i in np.flatnonzero(z > z_max):  # exponent too large for int64: decide exactly in Python ints
            accept[i] = _bern_exp_scalar(src, (d * int(z[i]) - m) ** 2 * bn, bd)
        keep[lanes] = accept
        return y, keep

    return _collect_accepted(n, propose)


_CHUNK = 1 << 17  # lanes per pass: large enough to amortise the rounds, small enough to stay in cache


def _let_heap_recycle_chunk_buffers() -> None:
    """Make glibc reuse heap memory for our chunk-sized temporaries instead of fresh mmap pages.

    glibc serves blocks above M_MMAP_THRESHOLD (128 KiB at start) from new mmap pages and unmaps them on
    free, so each pass's temporary arrays would page-fault afresh (measured on this project's machines:
    half of a 10**7-draw call spent in the kernel). Freeing an mmapped block raises that threshold to the
    block's size (mallopt(3), "dynamic mmap threshold"). One untouched 24 MiB block, allocated and freed
    once at import, does that; it costs microseconds and touches no page. Elsewhere it is a no-op.
    """
    np.empty(24 << 20, dtype=np.uint8)


_let_heap_recycle_chunk_buffers()


def _chunked(sample: Callable[[int], np.ndarray], n: int) -> np.ndarray:
    """``sample(k)`` for at least _MIN_BATCH lanes, in passes of at most _CHUNK; the first ``n`` values."""
    total = max(n, _MIN_BATCH)
    if total <= _CHUNK:
        out = sample(total)
    else:
        out = np.empty(total, dtype=np.int64)
        for start in range(0, total, _CHUNK):
            stop = min(start + _CHUNK, total)
            out[start:stop] = sample(stop - start)
    return out if total == n else out[:n].copy()


def _bern_exp_scalar(src: RandomSource, num: int, den: int) -> bool:
    """Bernoulli(exp(-num/den)) for Python ints of any size (the rare fallback): CKS Algorithm 1."""
    g, r = divmod(num, den)
    for _ in range(g):
        if not _bern_exp_frac_scalar(src, 1, 1):
            return False
    return _bern_exp_frac_scalar(src, r, den)


def _bern_exp_frac_scalar(src: RandomSource, r: int, den: int) -> bool:
    k = 1
    while _uniform_int(src, den * k) < r:
        k += 1
    return bool(k & 1)


def _uniform_int(src: RandomSource, bound: int) -> int:
    """One exactly uniform Python int in [0, bound), any bound >= 1 (masking and rejection)."""
    if bound == 1:
        return 0
    bits = (bound - 1).bit_length()
    mask = (1 << bits) - 1
    nbytes = (bits + 7) // 8
    while True:
        v = int.from_bytes(src.random_bytes(nbytes), "little") & mask
        if v < bound:
            return v


# --------------------------------------------------------------------------------------------------
# public samplers
# --------------------------------------------------------------------------------------------------


def bernoulli_exp(num: npt.ArrayLike, den: npt.ArrayLike, source: RandomSource | None = None) -> np.ndarray:
    """Independent booleans with ``P(True) = exp(-num/den)``, exactly.

    ``num`` (``>= 0``) and ``den`` (``>= 1``) are ints or integer arrays below ``2**63``; they are
    broadcast together and the result has the broadcast shape (0-d for two ints).
    """
    src = source if source is not None else default_source()
    n_arr = _int_array(num, "num")
    d_arr = _int_array(den, "den")
    if n_arr.size and (int(n_arr.min()) < 0 or int(n_arr.max()) > _I64_MAX):
        raise ValueError("num must be in [0, 2**63)")
    if d_arr.size and (int(d_arr.min()) < 1 or int(d_arr.max()) > _I64_MAX):
        raise ValueError("den must be in [1, 2**63)")
    shape = np.broadcast_shapes(n_arr.shape, d_arr.shape)
    count = math.prod(shape)
    if count == 0:
        return np.zeros(shape, dtype=bool)
    flat_num = np.ascontiguousarray(np.broadcast_to(n_arr.astype(np.int64), shape)).reshape(-1)
    if d_arr.ndim == 0 or np.all(d_arr == d_arr.flat[0]):
        res = _bern_exp_vec(src, flat_num, int(d_arr.flat[0]))
    else:
        flat_den = np.ascontiguousarray(np.broadcast_to(d_arr.astype(np.int64), shape)).reshape(-1)
        res = _bern_exp_vec(src, flat_num, flat_den)
    return res.reshape(shape)


def geometric_exp(num: int, den: int, size: int, source: RandomSource | None = None) -> np.ndarray:
    """``size`` independent int64 draws with ``P(k) = (1-q) q**k``, ``q = exp(-num/den)``, ``k >= 0``.

    ``num`` and ``den`` are positive ints whose reduced ratio has both parts ``<= 2**48``.
    """
    src = source if source is not None else default_source()
    for value, name in ((num, "num"), (den, "den")):
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise TypeError(f"{name} must be an int")
    if num < 1 or den < 1:
        raise ValueError("num and den must be >= 1")
    n = _as_count(size, "size")
    s, t = _rational_param(Fraction(int(num), int(den)), "num/den")
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        out[start:stop] = _geometric(src, t, s, stop - start)
    return out


def discrete_laplace(scale: Fraction | int, size: int, source: RandomSource | None = None) -> np.ndarray:
    """``size`` independent int64 draws with ``P(x) ~ exp(-|x|/scale)`` over all integers, exactly.

    ``scale`` is a positive ``Fraction`` (or int) with numerator and denominator ``<= 2**48``.
    """
    src = source if source is not None else default_source()
    t, s = _rational_param(scale, "scale")
    n = _as_count(size, "size")
    return _chunked(lambda k: _laplace(src, t, s, k), n)


def discrete_gaussian(sigma_squared: Fraction | int, size: int, source: RandomSource | None = None) -> np.ndarray:
    """``size`` independent int64 draws with ``P(x) ~ exp(-x**2 / (2 sigma_squared))``, exactly.

    ``sigma_squared`` is a positive ``Fraction`` (or int) with numerator and denominator ``<= 2**48``.
    """
    src = source if source is not None else default_source()
    a, b = _rational_param(sigma_squared, "sigma_squared")
    n = _as_count(size, "size")
    return _chunked(lambda k: _gaussian(src, a, b, k), n)


# --------------------------------------------------------------------------------------------------
# selection: permute-and-flip (McKenna & Sheldon 2020)
# --------------------------------------------------------------------------------------------------

#: Gaps are int64, saturated at this value: a flip never accepts a gap this large (see ``_flips``), so every gap at or
#: above it behaves alike and one representation (int64) serves every size. Callers with scores beyond int64
#: saturate them exactly (``saturated_gaps``; dpcli.mechanisms.quantiles computes its own with public-size work).
GAP_CAP = 1 << 62
_KEY_LIMIT = np.uint64(1 << 63)  # order keys are 63-bit; this value, above them all, marks a rejected lane
_LANES = 1 << 20  # flips per pass of exponential_sample (bounds its working set)


def _flips(src: RandomSource, num: int, den: int, lanes: int) -> np.ndarray:
    """``lanes`` independent int64 G with P(G >= k) = exp(-k num / den) (k >= 0): the acceptance test of each
    candidate is ``G >= gap``, probability exactly exp(-gap num / den). Drawn by the exact geometric sampler, whose
    work depends on its own random bits only. G < GAP_CAP unless an event of probability below exp(-2**13) occurs
    (num/den >= 2**-48): then OverflowError, whatever the gaps (so never a wrong answer, nor a data-dependent one)."""
    if num == 0:  # every weight is 1: every candidate is accepted
        return np.full(lanes, GAP_CAP, dtype=np.int64)
    g = np.empty(lanes, dtype=np.int64)
    for start in range(0, lanes, _CHUNK):  # passes of _CHUNK lanes keep the working set in cache
        stop = min(start + _CHUNK, lanes)
        g[start:stop] = _geometric(src, den, num, stop - start)
    if lanes and int(g.max()) >= GAP_CAP:
        raise OverflowError("a permute-and-flip draw does not fit its int64 comparison")
    return g


def _order_keys(src: RandomSource, rows: int, m: int) -> np.ndarray:
    """(rows, m) uint64 keys below 2**63, distinct within each row: uniform iid keys conditioned on no tie, so each
    row's ascending order is an exactly uniform permutation of its m lanes (exchangeability). A row with a tie
    (probability below m**2 / 2**64) is redrawn whole; which rows are redrawn depends on the random bits only."""
    keys = src.uint64(rows * m).reshape(rows, m) >> _U64_ONE
    while True:
        ordered = np.sort(keys, axis=1)
        tied = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if not tied.size:
            return keys
        keys[tied] = src.uint64(tied.size * m).reshape(tied.size, m) >> _U64_ONE


def _permute_and_flip(src: RandomSource, gaps: np.ndarray, num: int, den: int) -> np.ndarray:
    """One permute-and-flip draw per row of ``gaps`` ((rows, m) int64 in [0, GAP_CAP], a 0 in every row): visit the
    candidates in a uniformly random order and release the first whose flip succeeds, a flip of candidate i
    succeeding with probability exp(-(num/den) gaps[i]). Realised with work fixed by (rows, m, num/den) alone: one
    flip G_i for every candidate (accepted iff G_i >= gap_i) and one order key per candidate, then the accepted
    candidate with the least key; the comparisons and the minimum are whole-array numpy operations. Each row's
    answer is an index in [0, m)."""
    rows, m = gaps.shape
    flips = _flips(src, num, den, rows * m).reshape(rows, m)
    keys = _order_keys(src, rows, m)
    # the candidate with the least gap is always accepted (G >= 0), so every row has an accepted lane
    chosen: np.ndarray = np.argmin(np.where(flips >= gaps, keys, _KEY_LIMIT), axis=1)
    return chosen.astype(np.int64)


def saturated_gaps(scores: npt.ArrayLike) -> np.ndarray:
    """best - score per score, as int64 saturated at GAP_CAP (exact below it). ``scores``: an int64/uint64 array or
    a sequence of Python ints of any size. An int64 array is handled with uint64 differences (exact: a difference
    of two int64 is below 2**64); other inputs go through Python ints, so the representation is the caller's
    choice (dpcli's own callers pass int64), never the data's."""
    arr = np.asarray(scores)
    if arr.dtype.kind in "iu" and arr.dtype.itemsize <= 8:
        values = arr.reshape(-1)
        if values.dtype.kind == "u":
            diff = values.max() - values
        else:
            diff = values.max().astype(np.int64).view(np.uint64) - values.astype(np.int64).view(np.uint64)
        saturated: np.ndarray = np.minimum(diff, np.uint64(GAP_CAP))
        return saturated.astype(np.int64)
    ints = [int(v) for v in np.asarray(scores, dtype=object).reshape(-1)]
    top = max(ints)
    return np.array([min(top - v, GAP_CAP) for v in ints], dtype=np.int64)


def _check_ints(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise TypeError(f"{name} must be an int")


def _rate(num: int, den: int) -> tuple[int, int]:
    """(num, den) of the rate num/den in lowest terms: num >= 0, den >= 1, both <= 2**48 once reduced (the geometric
    sampler's domain: the plan rounds every temperature onto it)."""
    _check_ints(num=num, den=den)
    num, den = int(num), int(den)
    if num < 0 or den < 1:
        raise ValueError("num must be >= 0 and den >= 1")
    if num == 0:
        return 0, 1
    return _rational_param(Fraction(num, den), "num/den")


def permute_and_flip(gaps: npt.ArrayLike, num: int, den: int, source: RandomSource | None = None) -> int:
    """One index of ``gaps`` (int64 >= 0, saturated at GAP_CAP, at least one 0) by permute-and-flip at rate num/den:
    P(i) is the chance that i is the first accepted in a uniformly random order, each candidate accepted with
    probability exp(-(num/den) gaps[i]); work fixed by len(gaps) and num/den. eps-DP for a utility of sensitivity D
    at rate eps / (2 D) (eps / D for a monotone utility), as the exponential mechanism (McKenna & Sheldon 2020)."""
    src = source if source is not None else default_source()
    num, den = _rate(num, den)
    g = np.asarray(gaps)
    if g.dtype != np.int64 or g.ndim != 1 or not g.size:
        raise ValueError("gaps must be a non-empty 1-d int64 array")
    return int(_permute_and_flip(src, g.reshape(1, -1), num, den)[0])


def exponential_choice(
    scores: npt.ArrayLike, num: int, den: int, k: int = 1, source: RandomSource | None = None
) -> np.ndarray:
    """``k`` distinct indices of ``scores`` (integers), drawn one after another without replacement (peeling): each
    draw is permute-and-flip over the indices left, index i accepted with probability exp(-(num/den) (best -
    scores[i])), best the largest score left. Returns int64 indices in draw order.

    Work: draw j flips and orders the m - j indices left, whatever the scores (``_permute_and_flip``): the time and
    the CSPRNG bytes used depend on m, k and num/den only. So the selection with utility ``u`` of sensitivity ``D``
    at budget ``eps`` (a Fraction) is ``exponential_choice(u, eps.numerator, 2 * D * eps.denominator)``
    (``D * eps.denominator`` for a monotone utility), each draw eps-DP; k peeled draws are k eps-DP (composition).
    Permute-and-flip is pure eps-DP with expected utility at least the exponential mechanism's at the same
    temperature, and no draw ever fails (McKenna & Sheldon 2020). It is not claimed eps-bounded-range: the zCDP
    accounting of a draw is eps^2 / 2."""
    src = source if source is not None else default_source()
    _check_ints(k=k)
    rate = _rate(num, den)
    gaps = saturated_gaps(scores)
    values = np.asarray(scores)
    if not gaps.size:
        raise ValueError("no scores to choose from")
    if not 0 <= k <= gaps.size:
        raise ValueError("k must be between 0 and the number of scores")
    left = np.arange(gaps.size, dtype=np.int64)
    chosen: list[int] = []
    for _ in range(k):
        left_gaps = saturated_gaps(values.reshape(-1)[left]) if len(chosen) else gaps
        pick = int(_permute_and_flip(src, left_gaps.reshape(1, -1), *rate)[0])
        chosen.append(int(left[pick]))
        left = np.delete(left, pick)
    return np.array(chosen, dtype=np.int64)


def exponential_sample(
    scores: npt.ArrayLike, num: int, den: int, size: int, source: RandomSource | None = None
) -> np.ndarray:
    """``size`` independent indices of ``scores`` (with replacement), each one draw of ``exponential_choice``
    (permute-and-flip at rate num/den), vectorised: the audit's many trials of a release's draw."""
    src = source if source is not None else default_source()
    rate = _rate(num, den)
    n = _as_count(size, "size")
    gaps = saturated_gaps(scores)
    if not gaps.size:
        raise ValueError("no scores to choose from")
    out = np.empty(n, dtype=np.int64)
    rows = max(1, _LANES // gaps.size)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        out[start:stop] = _permute_and_flip(src, np.broadcast_to(gaps, (stop - start, gaps.size)), *rate)
    return out


# --------------------------------------------------------------------------------------------------
# selection: the exponential mechanism, exactly (its own law, for bounded-range accounting)
# --------------------------------------------------------------------------------------------------

#: Trials per batch of ``exponential_mechanism``, per candidate: a batch has no accepted trial with probability at
#: most (1 - 1/m)**(45 m) <= exp(-45) < 2**-64 (a 0 gap is accepted whenever proposed).
EM_TRIALS_PER_CANDIDATE = 45


def _em_trials(src: RandomSource, gaps: np.ndarray, num: int, den: int, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """``trials`` iid trials of the rejection sampler: a uniform index J in [0, m) and whether its flip accepts it
    (probability exp(-(num/den) gaps[J])). The index draws and the flips use work set by their own random bits; the
    gaps only enter the final whole-array comparison."""
    index = src.integers_below(gaps.size, size=trials)
    flips = _flips(src, num, den, trials)
    accepted: np.ndarray = flips >= gaps[index]
    return index, accepted


def _checked_gaps(gaps: npt.ArrayLike) -> np.ndarray:
    g = np.asarray(gaps)
    if g.dtype != np.int64 or g.ndim != 1 or not g.size:
        raise ValueError("gaps must be a non-empty 1-d int64 array")
    if int(g.min()) != 0 or int(g.max()) > GAP_CAP:
        raise ValueError("gaps must lie in [0, GAP_CAP] with at least one 0 (best - score; see saturated_gaps)")
    return g


def exponential_mechanism(gaps: npt.ArrayLike, num: int, den: int, source: RandomSource | None = None) -> int:
    """One index of ``gaps`` (a non-empty 1-d int64 array in [0, GAP_CAP] holding a 0: best - score, see
    ``saturated_gaps``) with P(i) proportional to exp(-(num/den) gaps[i]), exactly: the exponential mechanism.

    For a utility of sensitivity D at budget eps, the rate is eps / (2 D): eps-DP and eps-bounded-range, so
    eps**2/8-zCDP (Cesar & Rogers 2021). Rejection sampling with a uniform proposal in batches of
    ``EM_TRIALS_PER_CANDIDATE * len(gaps)`` trials, every trial drawn and flipped: the CSPRNG bytes used depend on
    len(gaps), num/den and the random bits only, except the extra batch drawn when a whole batch has no accepted
    trial (probability below 2**-64). See the module docstring."""
    src = source if source is not None else default_source()
    rate = _rate(num, den)
    g = _checked_gaps(gaps)
    batch = EM_TRIALS_PER_CANDIDATE * g.size
    positions = np.arange(batch, dtype=np.int64)
    while True:
        index, accepted = _em_trials(src, g, *rate, batch)
        # the first accepted trial by a full-array minimum (a boolean argmax would stop at the first True)
        first = int(np.where(accepted, positions, batch).min())
        if first < batch:
            return int(index[first])


def exponential_mechanism_sample(
    gaps: npt.ArrayLike, num: int, den: int, size: int, source: RandomSource | None = None
) -> np.ndarray:
    """``size`` independent draws of ``exponential_mechanism`` (int64 indices), vectorised: the same trials, the
    accepted ones kept in trial order (iid, each from the exact law), without the fixed-work batches (for tests and
    the audit, which see no data)."""
    src = source if source is not None else default_source()
    rate = _rate(num, den)
    g = _checked_gaps(gaps)
    n = _as_count(size, "size")
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        out[start:stop] = _collect_accepted(stop - start, lambda k: _em_trials(src, g, *rate, k))
    return out
