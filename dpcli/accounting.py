"""Privacy budgets as exact values.

Every epsilon that is compared, added or stored is a ``fractions.Fraction``: float sums break budget checks
(0.1 + 0.2 != 0.3), and a ledger that lets a rounding error through lets an attacker spend past the cap.
Numbers come in from decimal text (the spec, the command line, the ledger) and go out as exact text.
"""

from __future__ import annotations

import re
from fractions import Fraction

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
    if _RATIONAL.fullmatch(s):
        num, den = s.split("/")
        if int(den) == 0:
            raise ValueError("zero denominator")
        return Fraction(int(num), int(den))
    if not _DECIMAL.fullmatch(s) or not s.isascii():
        raise ValueError("not a decimal number")
    mantissa, _, exponent = s.lower().partition("e")
    if exponent and abs(int(exponent)) > _MAX_EXPONENT:
        raise ValueError("exponent out of range")
    return Fraction(s)


def is_terminating(value: Fraction) -> bool:
    """True when the fraction has a finite decimal expansion (denominator of the form 2^a 5^b)."""
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    return den == 1


def format_exact(value: Fraction) -> str:
    """Exact text for a fraction: a plain decimal when it terminates ("0.3"), else "p/q" ("1/3")."""
    if value.denominator == 1:
        return str(value.numerator)
    if not is_terminating(value):
        return f"{value.numerator}/{value.denominator}"
    sign = "-" if value < 0 else ""
    v = abs(value)
    digits = 0
    while (v * 10**digits).denominator != 1:
        digits += 1
    scaled = (v * 10**digits).numerator
    whole, frac = divmod(scaled, 10**digits)
    return f"{sign}{whole}.{str(frac).rjust(digits, '0')}"


def format_decimal(value: Fraction, significant: int = 15) -> str:
    """Human/decimal text: exact when the decimal terminates, else rounded to `significant` digits."""
    if is_terminating(value):
        return format_exact(value)
    return f"{float(value):.{significant}g}"


def round_up(value: Fraction, max_denominator: int) -> Fraction:
    """The smallest fraction with denominator <= max_denominator that is >= value (conservative rounding)."""
    if value.denominator <= max_denominator:
        return value
    den = max_denominator
    num = -((-value.numerator * den) // value.denominator)  # ceil(value * den)
    return Fraction(num, den)


def round_down(value: Fraction, max_denominator: int) -> Fraction:
    """The largest fraction with denominator <= max_denominator that is <= value."""
    if value.denominator <= max_denominator:
        return value
    den = max_denominator
    return Fraction((value.numerator * den) // value.denominator, den)
