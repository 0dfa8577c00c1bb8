"""Exact budget arithmetic: parse_exact, format_exact, round_up / round_down."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dpcli.core.accounting import format_decimal, format_exact, is_terminating, parse_exact, round_down, round_up

# ---------------------------------------------------------------------------------------------------------------
# parse_exact


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("0", Fraction(0)),
        ("-0", Fraction(0)),
        ("-2", Fraction(-2)),
        ("+3", Fraction(3)),
        ("0.1", Fraction(1, 10)),
        ("0.3", Fraction(3, 10)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("1e-3", Fraction(1, 1000)),
        ("1E3", Fraction(1000)),
        ("1e+5", Fraction(100000)),
        ("2.5e-1", Fraction(1, 4)),
        ("1e-400", Fraction(1, 10**400)),
        ("1e400", Fraction(10**400)),
        ("0.000001", Fraction(1, 10**6)),
        ("99999.99", Fraction(9999999, 100)),
        ("1/3", Fraction(1, 3)),
        ("-1/3", Fraction(-1, 3)),
        ("+2/4", Fraction(1, 2)),
        (" 1 ", Fraction(1)),
        ("0.1\n", Fraction(1, 10)),
    ],
)
def test_parse_exact_accepts(text, value):
    result = parse_exact(text)
    assert result == value
    assert type(result) is Fraction


def test_parse_exact_is_exact_where_floats_are_not():
    assert parse_exact("0.1") + parse_exact("0.2") == parse_exact("0.3")
    assert parse_exact("0.1") != Fraction(0.1)


@pytest.mark.parametrize(
    "text",
    [
        "1_000",
        "0x10",
        "0o7",
        "0b1",
        "١٢٣",  # Arabic-Indic digits
        "٣.٥",
        "١/٢",
        "1/٢",
        "１",  # fullwidth digit
        "½",
        "²",
        " nan",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        ".inf",
        "1e999999",
        "1e401",
        "1e-401",
        "",
        "  ",
        "1/0",
        "0/0",
        "1 /3",
        "1.5/2",
        "1/-2",
        "--1",
        "1e",
        "e1",
        ".",
        "1.2.3",
        "1j",
        "1,5",
        "1 000",
        "abc",
    ],
)
def test_parse_exact_rejects(text):
    with pytest.raises(ValueError, match=r"not a decimal number|zero denominator|exponent out of range"):
        parse_exact(text)


@pytest.mark.parametrize("value", [None, 1, 0.5, Fraction(1, 2), b"1"])
def test_parse_exact_rejects_non_text(value):
    with pytest.raises(ValueError, match="not text"):
        parse_exact(value)  # type: ignore[arg-type]


def test_parse_exact_refuses_a_huge_exponent_before_building_the_number():
    """The exponent is checked on the text: 10^(10^7) is never built. Measured as memory, not time (no wall-clock
    assertions): building it would allocate its ~4 MB of digits."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="exponent out of range"):
            parse_exact("1e10000000")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    with pytest.raises(ValueError, match="exponent out of range"):
        parse_exact("1e999999999999")  # would never finish if it were built


# ---------------------------------------------------------------------------------------------------------------
# format_exact


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(0), "0"),
        (Fraction(3), "3"),
        (Fraction(-3), "-3"),
        (Fraction(3, 10), "0.3"),
        (Fraction(-3, 10), "-0.3"),
        (Fraction(1, 10**6), "0.000001"),
        (Fraction(5, 4), "1.25"),
        (Fraction(-1, 8), "-0.125"),
        (Fraction(1, 3), "1/3"),
        (Fraction(-2, 3), "-2/3"),
        (Fraction(10, 7), "10/7"),
        (Fraction(1, 2**10), "0.0009765625"),
        (Fraction(12345, 100), "123.45"),
    ],
)
def test_format_exact(value, text):
    assert format_exact(value) == text


def test_format_decimal():
    assert format_decimal(Fraction(3, 10)) == "0.3"
    assert format_decimal(Fraction(1, 3)) == "0.333333333333333"
    assert format_decimal(Fraction(2, 3), 6) == "0.666667"


def test_is_terminating():
    assert is_terminating(Fraction(1, 2**5 * 5**7))
    assert not is_terminating(Fraction(1, 3))
    assert not is_terminating(Fraction(1, 2**5 * 7))


fractions = st.fractions(max_denominator=10**30)
big_fractions = st.builds(
    Fraction,
    st.integers(min_value=-(10**60), max_value=10**60),
    st.integers(min_value=1, max_value=10**60),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(fractions, big_fractions))
@example(Fraction(1, 10**400))
@example(Fraction(-1, 3))
@example(Fraction(0))
def test_format_exact_round_trips(value):
    text = format_exact(value)
    assert parse_exact(text) == value
    assert "e" not in text.lower()
    if is_terminating(value):
        assert "/" not in text
    else:
        assert "/" in text


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.integers(min_value=0, max_value=30),
)
def test_parse_then_format_of_decimal_text(mantissa, digits):
    value = Fraction(mantissa, 10**digits)
    text = format_exact(value)
    assert parse_exact(text) == value
    # and the scientific spelling of the same number parses to the same value
    assert parse_exact(f"{mantissa}e-{digits}") == value


# ---------------------------------------------------------------------------------------------------------------
# round_up / round_down


def test_round_up_examples():
    # the smallest fraction with denominator <= 3 that is >= 0.34 is 1/2 (not 2/3, the next multiple of 1/3)
    assert round_up(Fraction(34, 100), 3) == Fraction(1, 2)
    assert round_down(Fraction(34, 100), 3) == Fraction(1, 3)
    assert round_up(Fraction(1, 3), 10) == Fraction(1, 3)  # already representable: unchanged
    assert round_down(Fraction(1, 3), 3) == Fraction(1, 3)
    assert round_up(Fraction(1, 3), 2) == Fraction(1, 2)
    assert round_down(Fraction(1, 3), 2) == Fraction(0)
    assert round_up(Fraction(-1, 3), 2) == Fraction(0)
    assert round_down(Fraction(-1, 3), 2) == Fraction(-1, 2)
    assert round_up(Fraction(7, 3), 1) == Fraction(3)
    assert round_down(Fraction(7, 3), 1) == Fraction(2)
    assert round_up(Fraction(-7, 3), 1) == Fraction(-2)
    assert round_down(Fraction(-7, 3), 1) == Fraction(-3)
    assert round_up(Fraction(314159, 100000), 100) == Fraction(22, 7)
    assert round_down(Fraction(314159, 100000), 120) == Fraction(333, 106)


values = st.one_of(
    st.fractions(max_denominator=10**12),
    st.builds(Fraction, st.integers(-(10**40), 10**40), st.integers(1, 10**40)),
)
denominators = st.integers(min_value=1, max_value=2**60)


@settings(max_examples=500, deadline=None)
@given(values, denominators)
def test_round_up_and_down_bound_the_value_with_small_denominators(value, max_den):
    up, down = round_up(value, max_den), round_down(value, max_den)
    assert type(up) is Fraction
    assert type(down) is Fraction
    assert down <= value <= up
    assert up.denominator <= max_den
    assert down.denominator <= max_den
    if value.denominator <= max_den:
        assert up == down == value
    else:
        assert down < value < up
        # minimal: down and up are neighbours in the Farey sequence of order max_den, so no fraction with
        # denominator <= max_den lies strictly between them (and in particular none in [value, up) or (down, value])
        assert up.numerator * down.denominator - down.numerator * up.denominator == 1
        assert up.denominator + down.denominator > max_den


@settings(max_examples=300, deadline=None)
@given(
    st.builds(Fraction, st.integers(-300, 300), st.integers(1, 200)),
    st.integers(min_value=1, max_value=25),
)
def test_round_up_and_down_are_minimal_by_brute_force(value, max_den):
    candidates = set()
    for den in range(1, max_den + 1):
        floor = value.numerator * den // value.denominator
        candidates.update(Fraction(n, den) for n in range(floor - 1, floor + 3))
    assert round_up(value, max_den) == min(c for c in candidates if c >= value)
    assert round_down(value, max_den) == max(c for c in candidates if c <= value)


def test_round_rejects_a_zero_denominator_bound():
    with pytest.raises(ValueError, match="max_denominator must be at least 1"):
        round_up(Fraction(1, 3), 0)
    with pytest.raises(ValueError, match="max_denominator must be at least 1"):
        round_down(Fraction(1, 3), 0)
