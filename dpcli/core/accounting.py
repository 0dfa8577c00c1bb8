"""Privacy budgets as exact values.

Every epsilon that is compared, added or stored is a ``fractions.Fraction``: float sums break budget checks
(0.1 + 0.2 != 0.3), and a ledger that lets a rounding error through lets an attacker spend past the cap.
Numbers come in from decimal text (the spec, the command line, the ledger) and go out as exact text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_RATIONAL = re.compile(r"[+-]?\d+/\d+")

# Exponents beyond this are refused rather than expanded: "1e999999999" would otherwise build a huge integer.
_MAX_EXPONENT = 400


def parse_exact(text: str) -> Fraction:
    """Parse decimal text ("0.1", "1e-3", "-2") or a rational ("1/3") exactly.

    Raises ValueError for anything else: nan, inf, hex, underscores, unicode digits, empty text.
    """
    if not isinstance(text, str):
        raise ValueError("not text")
    s = text.strip()
    if not s.isascii():  # before either pattern: re's \d also matches non-ASCII digits ('١/٢' is not 1/2)
        raise ValueError("not a decimal number")
    if _RATIONAL.fullmatch(s):
        num, den = s.split("/")
        if int(den) == 0:
            raise ValueError("zero denominator")
        return Fraction(int(num), int(den))
    if not _DECIMAL.fullmatch(s):
        raise ValueError("not a decimal number")
    _, _, exponent = s.lower().partition("e")
    if exponent and abs(int(exponent)) > _MAX_EXPONENT:
        raise ValueError("exponent out of range")
    return Fraction(s)


def _check_exact(value: object, what: str) -> None:
    # a float here is a bug (budgets are exact); an int is taken as the Fraction it is
    if isinstance(value, bool) or not isinstance(value, int | Fraction) or value < 0:
        raise TypeError(f"{what} is a non-negative Fraction, not {value!r}")


@dataclass(frozen=True)
class Budget:
    """A privacy cost, as one typed value (what the ledger's spend takes, never loose numbers).

    ``epsilon`` is pure ε-DP, ``rho`` zCDP ρ (converted against the cap's δ only when budgets are compared),
    ``selection_delta`` the δ that partition selections spend outright (the spend record's ``delta``). A spend has no
    δ of its own: the δ zCDP is converted at is the cap's (``Cap``). Room to grow: the exponential mechanism's
    selection charge (issue 27) becomes a field here, and every backend and check sees it through this one value.
    """

    epsilon: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)
    selection_delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        for name in ("epsilon", "rho", "selection_delta"):
            value = getattr(self, name)
            _check_exact(value, f"a budget's {name}")
            object.__setattr__(self, name, Fraction(value))


@dataclass(frozen=True)
class Cap:
    """A dataset's allowance in the ledger, as one typed value (what ``Ledger.set_cap`` takes): ``epsilon`` bounds
    what its releases spend together (as the ledger composes them), ``delta`` is the cap's δ (zCDP spends are
    converted at what partition selections leave of it). ``per_period`` (issue 26): the cap renews per DECLARED
    period: it bounds what the spends naming one period key spend together (a release's id, a series' period), never
    what a clock day spends; a person present in k periods has k times the cap. A cap without it is the dataset's
    lifetime cap, and its record's fields stay as they were."""

    epsilon: Fraction
    delta: Fraction = Fraction(0)
    per_period: bool = False

    def __post_init__(self) -> None:
        for name in ("epsilon", "delta"):
            value = getattr(self, name)
            _check_exact(value, f"a cap's {name}")
            object.__setattr__(self, name, Fraction(value))


def decimal_places(den: int) -> int | None:
    """For a denominator 2^a 5^b, max(a, b): the decimal places of its fractions in lowest terms; else None."""
    twos = (den & -den).bit_length() - 1  # the power of 2 in one step (dividing by 2 in a loop is quadratic)
    rest, fives = den >> twos, 0
    while rest % 5 == 0:
        rest //= 5
        fives += 1
    return max(twos, fives) if rest == 1 else None


def is_terminating(value: Fraction) -> bool:
    """True when the fraction has a finite decimal expansion (denominator of the form 2^a 5^b)."""
    return decimal_places(value.denominator) is not None


def format_exact(value: Fraction) -> str:
    """Exact text for a fraction: a plain decimal when it terminates ("0.3"), else "p/q" ("1/3")."""
    if value.denominator == 1:
        return str(value.numerator)
    digits = decimal_places(value.denominator)
    if digits is None:
        return f"{value.numerator}/{value.denominator}"
    sign = "-" if value < 0 else ""
    # one exact division (multiplying by 10 until whole is quadratic in the digits: 6 s for 4,200 of them)
    scaled = abs(value.numerator) * 10**digits // value.denominator
    whole, frac = divmod(scaled, 10**digits)
    return f"{sign}{whole}.{str(frac).rjust(digits, '0')}"


def format_decimal(value: Fraction, significant: int = 15) -> str:
    """Human/decimal text: exact when the decimal terminates, else rounded to `significant` digits."""
    if is_terminating(value):
        return format_exact(value)
    return f"{float(value):.{significant}g}"


def format_decimal_up(value: Fraction, significant: int = 15) -> str:
    """Decimal text that never reads as less than ``value``: exact when the decimal terminates, else rounded *up*
    (towards +infinity) at ``significant`` digits, in exact arithmetic. For spent budgets: 1/3 is
    ``0.333333333333334``, so three thirds printed never add up to less than what was charged."""
    if is_terminating(value):
        return format_exact(value)
    sign = -1 if value < 0 else 1
    magnitude = abs(value)
    # the exponent e with 10^e <= |value| < 10^(e+1), found exactly (a float log10 can be off by one)
    e = len(str(magnitude.numerator)) - len(str(magnitude.denominator))
    while Fraction(10) ** e > magnitude:
        e -= 1
    while Fraction(10) ** (e + 1) <= magnitude:
        e += 1
    step = Fraction(10) ** (e - significant + 1)
    units = magnitude / step
    whole = units.numerator // units.denominator
    # not terminating, so never a whole number of steps: round away from zero for positives, towards it for negatives
    rounded = (whole + 1 if sign > 0 else whole) * step * sign
    return format_exact(rounded)


def _neighbours(value: Fraction, max_denominator: int) -> tuple[Fraction, Fraction]:
    """The fractions with denominator <= max_denominator just below and just above ``value`` (its neighbours in the
    Farey sequence of that order), for a value whose own denominator is larger: the last convergent of its continued
    fraction and the largest semiconvergent on the other side (as in ``Fraction.limit_denominator``)."""
    if max_denominator < 1:
        raise ValueError("max_denominator must be at least 1")
    whole = value.numerator // value.denominator
    n, d = (value - whole).numerator, (value - whole).denominator  # 0 < n/d < 1
    p0, q0, p1, q1 = 0, 1, 1, 0
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_denominator:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_denominator - q0) // q1
    b1, b2 = Fraction(p0 + k * p1, q0 + k * q1), Fraction(p1, q1)
    return whole + min(b1, b2), whole + max(b1, b2)


def round_up(value: Fraction, max_denominator: int) -> Fraction:
    """The smallest fraction with denominator <= max_denominator that is >= value (conservative rounding)."""
    if value.denominator <= max_denominator:
        return value
    return _neighbours(value, max_denominator)[1]


def round_down(value: Fraction, max_denominator: int) -> Fraction:
    """The largest fraction with denominator <= max_denominator that is <= value."""
    if value.denominator <= max_denominator:
        return value
    return _neighbours(value, max_denominator)[0]


# ---------------------------------------------------------------------------------------------------------------
# zero-concentrated DP (zCDP) and its conversion to (epsilon, delta)
#
# A discrete Gaussian with variance sigma^2 on an integer query of L2 sensitivity D is rho-zCDP with
# rho = D^2 / (2 sigma^2) (Canonne, Kamath & Steinke 2020, Thm 14); pure epsilon-DP implies (epsilon^2 / 2)-zCDP.
# zCDP composes by adding rho. To compare with a cap stated as (epsilon, delta) we convert with CKS 2020,
# Proposition 12 (the tight conversion): rho-zCDP implies (epsilon, delta)-DP for every alpha > 1 with
#     epsilon = alpha*rho + (log(1/delta) + (alpha - 1)*log(1 - 1/alpha) - log(alpha)) / (alpha - 1).
# Any alpha gives a valid bound, so alpha is found with floats and the bound is then evaluated in interval
# arithmetic and rounded *up*: the result is a rigorous upper bound, never an underestimate.

_IV_PREC = 160
_EPS_DENOMINATOR = 10**12  # converted epsilons are rounded up to a multiple of 1e-12


# mpmath ships no annotations: its interval context and intervals are Any here.
def _iv() -> Any:
    from mpmath import iv

    iv.prec = _IV_PREC
    return iv


def _iv_num(x: Fraction) -> Any:
    iv = _iv()
    return iv.mpf(x.numerator) / iv.mpf(x.denominator)


def _iv_bounds(x: Any) -> tuple[Fraction, Fraction]:
    from mpmath import libmp

    return Fraction(*libmp.to_rational(x._mpi_[0])), Fraction(*libmp.to_rational(x._mpi_[1]))


def _cks_epsilon_float(rho: float, log_inv_delta: float, alpha: float) -> float:
    import math

    return alpha * rho + (log_inv_delta + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)) / (alpha - 1)


@lru_cache(maxsize=4096)  # pure; make_plan calls it per statistic, mostly with equal shares
def zcdp_to_epsilon(rho: Fraction, delta: Fraction) -> Fraction:
    """An upper bound (rounded up, rigorous) on the epsilon at which rho-zCDP implies (epsilon, delta)-DP."""
    import math

    if rho < 0 or not 0 < delta < 1:
        raise ValueError("need rho >= 0 and 0 < delta < 1")
    if rho == 0:
        return Fraction(0)
    r, lid = float(rho), -math.log(float(delta))
    # golden-section search for the best alpha on a log scale (the bound is unimodal in alpha)
    lo, hi = math.log(1 + 1e-9), math.log(1e7)
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if _cks_epsilon_float(r, lid, math.exp(a)) < _cks_epsilon_float(r, lid, math.exp(b)):
            hi = b
        else:
            lo = a
    alpha = Fraction(math.exp((lo + hi) / 2)).limit_denominator(10**9)
    if alpha <= 1:
        alpha = Fraction(1000000001, 10**9)
    iv = _iv()
    a, p, d = _iv_num(alpha), _iv_num(rho), _iv_num(delta)
    tight = a * p + (iv.log(1 / d) + (a - 1) * iv.log(1 - 1 / a) - iv.log(a)) / (a - 1)
    simple = p + 2 * iv.sqrt(p * iv.log(1 / d))  # the classic bound (Bun & Steinke 2016), never needed but safe
    upper = min(_iv_bounds(tight)[1], _iv_bounds(simple)[1])
    return round_up_to(upper, _EPS_DENOMINATOR)


def epsilon_delta_to_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """A rho (rounded down, rigorous) such that rho-zCDP implies (epsilon, delta)-DP.

    Closed form from inverting rho + 2 sqrt(rho log(1/delta)) = epsilon: rho = (sqrt(epsilon + L) - sqrt(L))^2
    with L = log(1/delta). Conservative: the tight conversion of this rho gives an epsilon at most the one asked.
    """
    if epsilon <= 0 or not 0 < delta < 1:
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    iv = _iv()
    e, d = _iv_num(epsilon), _iv_num(delta)
    log_inv = iv.log(1 / d)
    rho = (iv.sqrt(e + log_inv) - iv.sqrt(log_inv)) ** 2
    return round_down_to(_iv_bounds(rho)[0], _EPS_DENOMINATOR)


def pure_to_rho(epsilon: Fraction) -> Fraction:
    """epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun & Steinke 2016, Prop. 1.4). Exact."""
    return epsilon * epsilon / 2


@lru_cache(maxsize=4096)  # pure; make_plan calls it per Laplace statistic of a zCDP release
def rho_to_pure_epsilon(rho: Fraction) -> Fraction:
    """The largest epsilon (rounded down, rigorous) with epsilon^2 / 2 <= rho: a Laplace share of a zCDP budget."""
    iv = _iv()
    eps = iv.sqrt(2 * _iv_num(rho))
    return round_down_to(_iv_bounds(eps)[0], _EPS_DENOMINATOR)


def round_up_to(value: Fraction, denominator: int) -> Fraction:
    """ceil(value * denominator) / denominator."""
    return Fraction(math.ceil(value * denominator), denominator)  # math.ceil is exact on a Fraction


def round_down_to(value: Fraction, denominator: int) -> Fraction:
    """floor(value * denominator) / denominator."""
    return Fraction(math.floor(value * denominator), denominator)


# ---------------------------------------------------------------------------------------------------------------
# Private partition selection (open keys)
#
# Counts of the observed keys get discrete Laplace noise Z of scale t (P(Z = z) proportional to q^|z|, q = e^(-1/t));
# a key is released when its noisy count reaches the threshold tau. A key only the added person holds has a count of
# at most r (their rows, or 1 for a count of persons, in one key), and that person holds at most g such keys. It is
# released with probability at most P(Z >= tau - r) = q^(tau - r) / (1 + q) (tau - r >= 1), so some such key is
# released with probability at most g q^(tau - r) / (1 + q) (union bound): the delta of the selection. The keys both
# neighbours hold see the pure epsilon of the noisy counts (Korolova et al. 2009; Wilson et al. 2020).


def selection_delta(scale: Fraction, keys: int, per_key: int, threshold: int) -> Fraction:
    """A rigorous upper bound on the probability that some of ``keys`` keys, each with a count of at most
    ``per_key``, reaches ``threshold`` under discrete Laplace noise of ``scale`` (interval arithmetic, rounded up)."""
    m = threshold - per_key
    if m < 1:
        return Fraction(1)
    iv = _iv()
    t = _iv_num(scale)
    tail = keys * iv.exp(-m / t) / (1 + iv.exp(-1 / t))
    upper = _iv_bounds(tail)[1]
    if upper >= 1:
        return Fraction(1)
    # rounded up to 30 significant digits, whatever its size (the ledger and plan print it)
    magnitude = len(str(upper.denominator // max(upper.numerator, 1)))
    return round_up_to(upper, 10 ** (30 + magnitude))


@lru_cache(maxsize=1024)
def selection_threshold(scale: Fraction, keys: int, per_key: int, delta: Fraction) -> int:
    """The smallest threshold tau whose ``selection_delta`` is at most ``delta``: found with floats, then checked
    and moved one step at a time with the rigorous bound (the bound is decreasing in tau)."""
    import math

    if not 0 < delta < 1 or keys < 1 or per_key < 1:
        raise ValueError("need 0 < delta < 1, keys >= 1 and per_key >= 1")
    t = float(scale)
    guess = per_key + max(1, math.floor(t * (math.log(keys / float(delta)) - math.log1p(math.exp(-1 / t)))))
    tau = max(per_key + 1, guess - 1)
    while tau > per_key + 1 and selection_delta(scale, keys, per_key, tau - 1) <= delta:
        tau -= 1
    while selection_delta(scale, keys, per_key, tau) > delta:
        tau += 1
    return tau
