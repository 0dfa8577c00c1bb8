"""The random cases of the sensitivity property tests (tests/test_sensitivity_property.py and
tests/test_sensitivity_persons.py): random specs (every statistic kind, mechanism, neighbour relation and column
type) and random CSV *bytes* (malformed lines included) with one record changed; Hypothesis strategies only, no test
here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from math import ceil, floor

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.spec_builder import spec_text


def _examples(n: int) -> int:
    """n examples under the default profile (100 per test), scaled with the loaded profile (tests/conftest.py)."""
    return max(1, n * settings.default.max_examples // 100)


# too_slow / data_too_large: a case is a spec plus two files, bigger than Hypothesis' usual inputs by design;
# filter_too_much: a few drawn specs are refused by the loader (bins finer than the grid, variance limits)
_HEALTH = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
]


# ---------------------------------------------------------------------------------------------------------------
# Specs


@dataclass(frozen=True)
class Col:
    """A declared column as the data generator needs it (the spec text is rendered from the same values)."""

    name: str
    type: str  # int | float | category | bool
    lo: Fraction = Fraction(0)
    hi: Fraction = Fraction(0)
    step: Fraction = Fraction(1)  # a grid step for edges and test values: the precision, or 1/den for the default
    keys: tuple[str, ...] = ()  # declared keys; for an open column, the texts its cells are drawn from
    open: bool = False  # `categories: open`

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")


def dec(x: Fraction) -> str:
    """Exact decimal text of a fraction with a terminating expansion (denominators 2^a 5^b only)."""
    text = format(Decimal(x.numerator) / Decimal(x.denominator), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


KEY_POOL = ("a", "b", "Male", "no", "01", "1.0", "x y", "é", "a,b")


# an open column's usual texts: some agree on their first characters (one key once cut to max_length), some differ
# only by case or spaces (two keys), one is longer than any max_length drawn but 64
OPEN_TEXTS = ("a", "ab", "abc", "abd", "A", " a", "é", "éé", "x y", "a,b", 'q"q', "z" * 70, "")


@st.composite
def numeric_column(draw: st.DrawFn, name: str) -> tuple[Col, str]:
    ctype = draw(st.sampled_from(["int", "float"]))
    den, precision = 1, None
    if ctype == "float":
        den = draw(st.sampled_from([1, 2, 4, 10]))
        precision = draw(st.sampled_from([Fraction(1), Fraction(1, 2), Fraction(1, 4), Fraction(1, 10), None]))
    width = draw(st.integers(1, 40))
    signs = draw(st.sampled_from(["positive", "negative", "mixed"]))
    if signs == "positive":
        lo_units = draw(st.integers(0, 60))
    elif signs == "negative":
        lo_units = -width - draw(st.integers(0, 60))
    else:  # lo < 0 < hi (or lo < 0 = hi when the width is one unit)
        lo_units = -draw(st.integers(1, max(1, width - 1)))
    lo, hi = Fraction(lo_units, den), Fraction(lo_units + width, den)
    step = precision if precision is not None else Fraction(1, den)
    parts = [f"type: {ctype}", f"bounds: [{dec(lo)}, {dec(hi)}]"]
    if precision is not None:
        parts.append(f"precision: {dec(precision)}")
    if draw(st.integers(0, 2)) == 0:
        middle = Fraction(floor((lo + hi) / 2 / step)) * step  # on the column's grid (whole for int columns)
        parts.append(f"impute: {dec(draw(st.sampled_from([lo, hi, max(lo, middle)])))}")
    return Col(name, ctype, lo, hi, step), "{" + ", ".join(parts) + "}"


@st.composite
def key_column(draw: st.DrawFn, name: str) -> tuple[Col, str]:
    ctype = draw(st.sampled_from(["bool", "category"]))
    if ctype == "bool":
        keys: tuple[str, ...] = ("false", "true")
        parts = ["type: bool"]
    else:
        keys = tuple(draw(st.lists(st.sampled_from(KEY_POOL), min_size=1, max_size=3, unique=True)))
        parts = ["type: category", "categories: [" + ", ".join(json.dumps(k, ensure_ascii=False) for k in keys) + "]"]
        if draw(st.integers(0, 2)) == 0:
            parts.append(f"other: {json.dumps(draw(st.sampled_from(keys)), ensure_ascii=False)}")
    if draw(st.integers(0, 2)) == 0:
        parts.append(f"impute: {json.dumps(draw(st.sampled_from(keys)), ensure_ascii=False)}")
    return Col(name, ctype, keys=keys), "{" + ", ".join(parts) + "}"


ROW_AND_PERSON_KINDS = (
    "count", "count_by", "hist_edges", "hist_grid", "hist_keys", "sum", "sum_by", "mean", "mean_by", "top_k",
    "top_k_by",
)


TOP_K_KINDS = ("top_k", "top_k_by")  # without by:, and with a by: of declared columns
VARIANCE_KINDS = ("variance", "variance_by", "std", "std_by")


ALL_KINDS = (*ROW_AND_PERSON_KINDS, *VARIANCE_KINDS)


QUANTILE_KINDS = ("quantile", "quantile_by")


# under a person unit: counts of persons too (and every sum and mean says how it clamps), quantiles, variance and
# std (issue 25)
PERSON_KINDS = (*ROW_AND_PERSON_KINDS, "persons", "persons_by", *QUANTILE_KINDS, *VARIANCE_KINDS)


QUANTILE_LEVELS = ("0.5", "0.25", "0.9", "1/3", "0.01")


@st.composite
def statistic(
    draw: st.DrawFn,
    i: int,
    numerics: list[Col],
    keyed: list[Col],
    kinds: tuple[str, ...],
    gaussian: bool,
    person: bool = False,
    open_first: bool = False,
) -> str:
    """One statistic's YAML. An open column (in ``keyed``) only where the loader allows it: in a Laplace count's
    ``by:`` or as a Laplace histogram's column, at most one per statistic; ``open_first``: this one uses it."""
    if open_first:
        kinds = ("count_by", "hist_keys", "top_k", *(("persons_by",) if person else ()))
    if gaussian and set(kinds) - set(TOP_K_KINDS):  # a top_k is the exponential mechanism: no mechanism to choose
        kinds = tuple(k for k in kinds if k not in TOP_K_KINDS)
    kind = draw(st.sampled_from(kinds))
    parts = [f"name: s{i}"]
    column: Col | None = None
    opened = [c for c in keyed if c.open]
    declared = [c for c in keyed if not c.open]
    may_open = not gaussian and kind in ("count_by", "persons_by", "hist_keys", "hist_edges", "hist_grid", "top_k")
    if kind.startswith("count"):
        parts.append("kind: count")
    elif kind.startswith("persons"):
        parts += ["kind: count", "of: persons"]
    elif kind == "hist_keys":
        column = opened[0] if open_first else draw(st.sampled_from(keyed if may_open else declared))
        parts += ["kind: histogram", f"column: {column.name}"]
    elif kind in TOP_K_KINDS:  # top_k_by: declared keys in declared cells of by: (open ones are refused)
        column = opened[0] if open_first else draw(st.sampled_from(keyed if may_open else declared))
        k = draw(st.integers(1, 3 if column.open else len(column.keys)))
        parts += ["kind: top_k", f"column: {column.name}", f"k: {k}"]
    elif kind.startswith("hist"):
        column = draw(st.sampled_from(numerics))
        parts += ["kind: histogram", f"column: {column.name}"]
        u = column.step
        first, last = floor(column.lo / u), ceil(column.hi / u)
        if kind == "hist_edges":
            ks = sorted(draw(st.lists(st.integers(first - 3, last + 3), min_size=2, max_size=5, unique=True)))
            parts.append("bins: [" + ", ".join(dec(k * u) for k in ks) + "]")
        else:
            start = draw(st.integers(first - 2, first + 2)) * u
            step = draw(st.integers(1, 4)) * u
            stop = start + draw(st.integers(1, 8)) * step
            parts.append(f"bins: {{start: {dec(start)}, stop: {dec(stop)}, step: {dec(step)}}}")
    elif kind.startswith("quantile"):
        column = draw(st.sampled_from(numerics))
        levels = draw(st.lists(st.sampled_from(QUANTILE_LEVELS), min_size=1, max_size=3, unique=True))
        parts += ["kind: quantile", f"column: {column.name}", f"q: [{', '.join(levels)}]"]
        if draw(st.booleans()):  # candidates every few grid steps (values between two candidates too)
            parts.append(f"step: {dec(draw(st.integers(2, 5)) * column.step)}")
        if draw(st.booleans()):  # value-unit intervals: a count and two draws per level (the rank distance)
            parts.append("interval: {share: 0.5}")
    else:
        column = draw(st.sampled_from(numerics))
        parts += [f"kind: {kind.split('_')[0]}", f"column: {column.name}"]
    if person and kind.startswith(("sum", "mean")):  # required under a person unit
        parts.append(f"clamp: {draw(st.sampled_from(['row', 'person']))}")
    # by: forced for *_by kinds, optional for histograms (allowed there too)
    if kind.endswith("_by") or (kind.startswith("hist") and draw(st.integers(0, 2)) == 0):
        pool = keyed if may_open and not (column is not None and column.open) else declared
        candidates = [c.name for c in pool if column is None or c.name != column.name]
        if candidates:
            by = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=2, unique=True))
            if open_first and column is None and opened[0].name not in by:
                by = draw(st.permutations([opened[0].name, *by[:1]]))
            parts.append("by: [" + ", ".join(by) + "]")
    if gaussian and not kind.startswith("quantile") and kind not in TOP_K_KINDS:  # no noise mechanism to choose
        parts.append("mechanism: gaussian")
    if draw(st.integers(0, 3)) == 0:
        parts.append(f"weight: {draw(st.integers(1, 3))}")
    return "{" + ", ".join(parts) + "}"


@st.composite
def specs(
    draw: st.DrawFn,
    neighbours: str,
    forms: tuple[str, ...] = ("epsilon", "rho", "epsilon_delta"),
    kinds: tuple[str, ...] = ALL_KINDS,
    gaussian_only: bool = False,
    unit: str = "row",
    open_key: bool = False,
) -> tuple[str, list[Col]]:
    """Spec text over 1-2 numeric and 1-2 category/bool columns, and the columns for the data generator. ``unit``
    is the privacy unit's YAML (a flow mapping for a person unit). ``open_key``: an open column `o` too, which the
    first statistic uses, in a pure release with a delta (its partition selection's)."""
    numerics = [draw(numeric_column(f"n{j}")) for j in range(draw(st.integers(1, 2)))]
    keyed = [draw(key_column(f"c{j}")) for j in range(draw(st.integers(1, 2)))]
    if open_key:
        forms = ("epsilon",)
        body = f"{{type: category, categories: open, max_length: {draw(st.sampled_from([1, 2, 3, 8, 64]))}}}"
        keyed.append((Col("o", "category", keys=OPEN_TEXTS, open=True), body))
    form = draw(st.sampled_from(forms))
    if kinds == SYNTH_KINDS:
        return draw(synth_spec(neighbours, form, numerics, keyed))
    n_stats = draw(st.integers(1, 4))
    mechanisms = []
    for _ in range(n_stats):
        if form == "epsilon":
            mechanisms.append(False)  # a pure release: Laplace only
        else:
            mechanisms.append(gaussian_only or draw(st.booleans()))
    if form == "epsilon_delta":
        mechanisms[0] = True  # epsilon with delta needs at least one Gaussian statistic
    person = unit != "row"
    stats = [
        draw(statistic(i, [c for c, _ in numerics], [c for c, _ in keyed], kinds, g, person, open_key and i == 0))
        for i, g in enumerate(mechanisms)
    ]
    budget = {
        "epsilon": f"epsilon: {draw(st.sampled_from(['0.5', '1', '3']))}" + (", delta: 1e-6" if open_key else ""),
        "rho": f"rho: {draw(st.sampled_from(['0.5', '1', '4']))}",
        "epsilon_delta": f"epsilon: {draw(st.sampled_from(['1', '3']))}, delta: 1e-6",
    }[form]
    lines = [
        "version: 1",
        "dataset: d",
        f"privacy: {{unit: {unit}, neighbours: {neighbours}, {budget}}}",
        "columns:",
        *(f"  {c.name}: {body}" for c, body in numerics + keyed),
        "statistics:",
        *(f"  - {s}" for s in stats),
    ]
    return "\n".join(lines) + "\n", [c for c, _ in numerics + keyed]


SYNTH_KINDS = ("marginal",)  # a synth spec (issue 27): its one-way and pair marginals, as dpcli.plan.synth plans them


@st.composite
def synth_spec(
    draw: st.DrawFn, neighbours: str, form: str, numerics: list[tuple[Col, str]], keyed: list[tuple[Col, str]],
) -> tuple[str, list[Col]]:
    """A synth spec over the drawn columns: numeric ones binned by edges covering their bounds (one or two bins),
    each column's missing cells dropped or kept as a code of their own."""
    chosen = []
    for c, _ in numerics + keyed:
        parts = [f"missing: {draw(st.sampled_from(['drop', 'keep']))}"]
        if c.type in ("int", "float"):
            middle = c.lo + floor((c.hi - c.lo) / 2 / c.step) * c.step
            edges = [c.lo, *([middle] if middle > c.lo else []), c.hi + c.step]
            parts.append("bins: [" + ", ".join(dec(e) for e in edges) + "]")
        chosen.append(f"    {c.name}: {{{', '.join(parts)}}}")
    budget = "rho: 1" if form != "epsilon_delta" else "epsilon: 3, delta: 1e-6"
    lines = [
        "version: 1",
        "dataset: d",
        f"privacy: {{unit: row, neighbours: {neighbours}, {budget}}}",
        "columns:",
        *(f"  {c.name}: {body}" for c, body in numerics + keyed),
        "synth:",
        "  method: mst",
        "  columns:",
        *chosen,
    ]
    return "\n".join(lines) + "\n", [c for c, _ in numerics + keyed]


# ---------------------------------------------------------------------------------------------------------------
# CSV bytes


@dataclass(frozen=True)
class Flags:
    """Which kinds of hostile bytes lines may hold (the focused tests switch one on at a time)."""

    quotes: bool = False  # stray, unbalanced and doubled quotes; correctly quoted cells
    bad_utf8: bool = False  # invalid UTF-8 sequences
    controls: bool = False  # NUL, CR, other control bytes, a BOM inside a line, arbitrary binary
    junk: bool = True  # cells may mix in the tokens above; without it, cells are a column's values, missing or
    # malformed numbers and undeclared keys only (so more rows land in declared cells)


EVERYTHING = Flags(quotes=True, bad_utf8=True, controls=True)


BASE_TOKENS = (b",", b"a", b"1", b"-3", b"0.5", b" ", b"e", b"true", b"x y", b"Male", b"", b"99999999999999999999")


QUOTE_TOKENS = (b'"', b'"', b'""', b'"a,b"', b'"x""y"', b'"1"', b'a"', b',"')


BAD_UTF8_TOKENS = (
    b"\xff", b"\xfe", b"\xc3", b"\x80", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xc3\x28",
)


CONTROL_TOKENS = (b"\x00", b"\r", b"\t", b"\x1b", b"\x0b", b"\x0c", b"\xef\xbb\xbf", b"\x7f")


MALFORMED_NUMBERS = (
    "", " ", "abc", "1_000", "0x10", "nan", "NaN", "inf", "-inf", "1e309", "-1e309", "3.0", " 7", "7 ", "+3", "١٢٣",
    "--1", "1e", "1.2.3", "9223372036854775808", "-", ".", "1,5",
)


UNDECLARED_KEYS = ("", "A", "a ", " a", "zzz", "MALE", "male", "e\u0301", "NO", "1", "true", "x  y")


BOOL_TEXT = ("true", "false", "1", "0", "TRUE", "False", "tRuE", "yes", "", "2", "t", " true", "true ")


def _tokens(flags: Flags) -> tuple[bytes, ...]:
    return (
        BASE_TOKENS
        + (QUOTE_TOKENS if flags.quotes else ())
        + (BAD_UTF8_TOKENS if flags.bad_utf8 else ())
        + (CONTROL_TOKENS if flags.controls else ())
    )


def _numbers(col: Col) -> st.SearchStrategy[str]:
    lo, hi, u = col.lo, col.hi, col.step
    # the bounds and just past them first: the extremes set every sensitivity
    specials = [lo, hi, lo - u, hi + u, lo - 1000, hi + 10**6, (lo + hi) / 2, Fraction(0), lo + u, hi - u]
    exact = st.one_of(
        st.sampled_from(specials), st.integers(floor(lo / u) - 3, ceil(hi / u) + 3).map(lambda k: k * u)
    ).map(dec)
    # other spellings of the same value: scientific and "x.0" are missing in an int column, a value in a float one
    spellings = exact.flatmap(
        lambda t: st.sampled_from([f"{float(Fraction(t)):e}", f"+{t}".replace("+-", "-"), t + ".0"])
    )
    return st.one_of(exact, exact, exact, spellings, st.sampled_from(MALFORMED_NUMBERS))


def value_cells(col: Col | None) -> st.SearchStrategy[bytes]:
    """Cell text a person might really write in that column: values, extremes, missing, malformed, undeclared."""
    if col is None:  # an undeclared column: never read
        return st.sampled_from(["", "x", "1", "Male"]).map(str.encode)
    if col.numeric:
        return _numbers(col).map(str.encode)
    if col.type == "bool":
        return st.sampled_from(BOOL_TEXT).map(str.encode)
    if col.open:  # known texts, and new keys nobody has: any text without a line break
        text = st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n")  # no lone surrogate
        fresh = st.text(text, min_size=1, max_size=12)
        return st.one_of(st.sampled_from(col.keys), fresh).map(str.encode)
    return st.one_of(st.sampled_from(col.keys), st.sampled_from(KEY_POOL + UNDECLARED_KEYS)).map(str.encode)


def cells(col: Col | None, flags: Flags) -> st.SearchStrategy[bytes]:
    good = value_cells(col)
    cell = good
    if flags.junk:
        junk = st.lists(st.sampled_from(_tokens(flags)), min_size=1, max_size=4).map(b"".join)
        cell = st.one_of(good, good, junk, st.tuples(good, junk).map(b"".join), st.tuples(junk, good).map(b"".join))
    if flags.quotes:  # a correctly quoted cell, as a CSV writer would write it
        cell = st.one_of(cell, cell, cell.map(lambda c: b'"' + c.replace(b'"', b'""') + b'"'))
    return cell


@dataclass(frozen=True)
class Line:
    """One record's bytes; ``cells`` when it was built field by field (so a neighbour can change one field)."""

    raw: bytes
    cells: tuple[bytes, ...] | None = None


def _row(fields: tuple[bytes, ...]) -> Line:
    return Line(b",".join(fields), fields)


@st.composite
def row_lines(draw: st.DrawFn, header: list[Col | None], flags: Flags) -> Line:
    fields = [draw(cells(c, flags)) for c in header]
    ragged = draw(st.sampled_from([0, 0, 0, 0, 0, 0, -1, -2, 1, 2]))  # too few or too many fields
    if ragged < 0:
        fields = fields[: len(fields) + ragged]
    for _ in range(max(0, ragged)):
        fields.append(draw(cells(None, flags)))
    return _row(tuple(fields))


def raw_lines(flags: Flags) -> st.SearchStrategy[Line]:
    tokens = st.lists(st.sampled_from(_tokens(flags) + tuple(k.encode() for k in KEY_POOL)), max_size=8)
    raw = tokens.map(b"".join)
    if flags.quotes and flags.bad_utf8 and flags.controls:  # any bytes but the line terminator
        raw = st.one_of(raw, st.binary(max_size=16).map(lambda b: b.replace(b"\n", b"")))
    return raw.map(Line)


def lines(header: list[Col | None], flags: Flags) -> st.SearchStrategy[Line]:
    rows = row_lines(header, flags)
    return st.one_of(rows, rows, rows, raw_lines(flags)) if flags.junk else rows


@st.composite
def changed_line(draw: st.DrawFn, old: Line, header: list[Col | None], flags: Flags) -> Line:
    """A replacement for ``old``: a new line, or ``old`` with one field changed to any cell."""
    if old.cells is None or not old.cells or draw(st.integers(0, 2)) == 0:
        return draw(lines(header, flags))
    fields = list(old.cells)
    j = draw(st.integers(0, len(fields) - 1))
    fields[j] = draw(cells(header[j] if j < len(header) else None, flags))
    return _row(tuple(fields))


@st.composite
def extreme_swap(draw: st.DrawFn, old: Line, header: list[Col | None], flags: Flags) -> tuple[Line, Line]:
    """``old`` with one numeric field set to one bound (or past it), and its replacement with the other: the same
    row, the same cells, its value moved from L to U, the change that sets the sensitivity of sums and means."""
    numeric = [j for j, c in enumerate(header) if c is not None and c.numeric and old.cells and j < len(old.cells)]
    if not numeric:
        return old, draw(changed_line(old, header, flags))
    j = draw(st.sampled_from(numeric))
    col = header[j]
    assert col is not None
    assert old.cells is not None
    low = draw(st.sampled_from([col.lo, col.lo - col.step, col.lo - 1000]))
    high = draw(st.sampled_from([col.hi, col.hi + col.step, col.hi + 1000]))
    a, b = draw(st.permutations([low, high]))
    fields = list(old.cells)
    if draw(st.booleans()):  # and the row in a declared cell of every by: (else it may be in none)
        for k, c in enumerate(header[: len(fields)]):
            if c is not None and not c.numeric:
                fields[k] = draw(st.sampled_from(c.keys)).encode()
    fields[j] = dec(a).encode()
    before = _row(tuple(fields))
    fields[j] = dec(b).encode()
    return before, _row(tuple(fields))


def _with_focus(line: Line, focus: tuple[bytes, ...]) -> st.SearchStrategy[Line]:
    """``line`` with one of ``focus`` inserted: at the start of a field (where a quote opens one), or anywhere."""
    if not focus:
        return st.just(line)
    starts = [0] + [k + 1 for k, b in enumerate(line.raw) if b == ord(",")]
    where = st.one_of(st.sampled_from(starts), st.integers(0, len(line.raw)))
    return st.tuples(where, st.sampled_from(focus)).map(lambda t: Line(line.raw[: t[0]] + t[1] + line.raw[t[0] :]))


@dataclass(frozen=True)
class Case:
    spec: str
    data: bytes  # D
    neighbour: bytes  # D': one line added to D, or one line of D replaced (removal is the same pair read backwards)
    change: str  # what differs, for the failure message
    unchanged: bool = False  # D and D' hold the same persons (rows without an id under missing_id: drop)


def render(header: bytes, records: list[bytes], terminator: bytes, final: bool) -> bytes:
    body = terminator.join([header, *records])
    # an empty last record needs its terminator, else it would not be a line at all
    if final or (records and records[-1] == b""):
        body += terminator
    return body


@st.composite
def cases(
    draw: st.DrawFn,
    flags: Flags,
    neighbours: tuple[str, ...] = ("add_remove", "replace"),
    forms: tuple[str, ...] = ("epsilon", "rho", "epsilon_delta"),
    kinds: tuple[str, ...] = ALL_KINDS,
    gaussian_only: bool = False,
    focus: tuple[bytes, ...] = (),
    terminators: tuple[bytes, ...] = (b"\n", b"\r\n", b"\r"),
    open_key: bool = False,
    encodings: tuple[str, ...] = ("utf-8",),
) -> Case:
    """A spec, D and D'. With ``focus``, the added or replacing line always holds one of those byte strings (at a
    random place), so every example of a focused test exercises its cause. ``encodings``: the file's declared
    encoding is drawn from these (UTF-16 records then get raw bytes of their own: odd counts, lone surrogates)."""
    relation = draw(st.sampled_from(neighbours))
    spec, columns = draw(specs(relation, forms, kinds, gaussian_only, open_key=open_key))
    # the header is fine by construction (every declared column once, maybe an undeclared one, any order): from
    # here on nothing may fail the run, whatever the records hold
    header: list[Col | None] = list(columns) + ([None] if draw(st.booleans()) else [])
    header = draw(st.permutations(header))
    header_bytes = b",".join(b"u0" if c is None else c.name.encode() for c in header)
    line = lines(header, flags)
    # focused: records after the changed one too (an open quote's damage, if any, is to the lines after it)
    base = draw(st.lists(line, min_size=2 if focus else 0 if relation == "add_remove" else 1, max_size=6))
    if relation == "add_remove":
        i = draw(st.integers(0, len(base) - 1 if focus else len(base)))
        new = draw(st.one_of(line, st.sampled_from(base)) if base else line)  # a new record, or a duplicate
        new = draw(_with_focus(new, focus))
        other = [*base[:i], new, *base[i:]]
        change = f"line {i + 1} added: {new.raw!r}"
    else:
        i = draw(st.integers(0, len(base) - (2 if focus else 1)))
        if draw(st.integers(0, 2)) > 0:
            old, new = draw(extreme_swap(base[i], header, flags))
            base = [*base[:i], old, *base[i + 1:]]
        else:
            new = draw(changed_line(base[i], header, flags))
        new = draw(_with_focus(new, focus))
        other = [*base[:i], new, *base[i + 1:]]
        change = f"line {i + 1} replaced: {base[i].raw!r} -> {new.raw!r}"
    # The header's line end is the file's (docs/spec.md, "How lines are read"): in an LF file a CR is data; a header
    # ending in CR (CRLF or CR-only) makes every CR a line end and a lone LF data. So in those files the lines' CR
    # bytes become LF: same lines, and the LF-is-data rule tested too.
    terminator = draw(st.sampled_from(terminators))
    cr_file = terminator != b"\n"
    fix = (lambda b: b.replace(b"\r", b"\n")) if cr_file else (lambda b: b)
    final = draw(st.booleans())
    encoding = draw(st.sampled_from(encodings))
    if encoding != "utf-8":
        return draw(utf16_case(spec, encoding, header_bytes, base, other, terminator, final, change))
    return Case(
        spec,
        render(header_bytes, [fix(x.raw) for x in base], terminator, final),
        render(header_bytes, [fix(x.raw) for x in other], terminator, final),
        f"{change} [line end {terminator!r}{'; CR in lines written as LF' if cr_file else ''}]",
    )


# raw bytes a UTF-16 record may end or start with: odd counts, lone surrogates (both byte orders), a half line end
UTF16_JUNK = (b"1", b"\x00", b"\n", b"\r", b"\x00\xd8", b"\xd8\x00", b"\x00\xdc", b"\xdc\x00", b"\xff", b"a\x00b")


ENCODINGS = ("utf-8", "utf-16-le", "utf-16-be", "utf-16")


@st.composite
def utf16_case(draw: st.DrawFn, spec: str, encoding: str, header: bytes, base: list[Line], other: list[Line],
               terminator: bytes, final: bool, change: str) -> Case:
    """D and D' in a UTF-16 encoding: each record's text encoded, then raw bytes added at either end of some records
    (an odd byte count shifts the code units after it, if the reader lets it). A record never holds its line end's
    code unit at any offset: that would make it two records by the definition (docs/spec.md, "CSV dialects")."""
    codec = encoding
    bom = b""
    if encoding == "utf-16":
        codec = draw(st.sampled_from(["utf-16-le", "utf-16-be"]))
        bom = "\ufeff".encode(codec)
    cr_file = terminator != b"\n"
    term = ("\r" if cr_file else "\n").encode(codec)
    memo: dict[int, bytes] = {}

    def record(line: Line) -> bytes:
        if id(line) not in memo:  # the same Line object is the same record in D and D'
            text = line.raw.decode("utf-8", "replace")
            raw = (text.replace("\r", "\n") if cr_file else text).encode(codec)
            junk = draw(st.lists(st.sampled_from(UTF16_JUNK), max_size=2))
            if junk and draw(st.booleans()):  # one piece before the text, the other after it
                raw = junk[0] + raw + b"".join(junk[1:])
            else:
                raw += b"".join(junk)
            while term in raw:
                raw = raw.replace(term, b"")
            memo[id(line)] = raw
        return memo[id(line)]

    encoded = bom + header.decode().encode(codec)
    eol = terminator.decode().encode(codec)
    spec = spec.replace("dataset: d\n", f"dataset: d\ncsv: {{encoding: {encoding}}}\n", 1)
    return Case(
        spec,
        render(encoded, [record(x) for x in base], eol, final),
        render(encoded, [record(x) for x in other], eol, final),
        f"{change} [{encoding} ({codec}), line end {terminator!r}]",
    )


def _spec(columns: str, statistics: str, privacy: str = "neighbours: add_remove, epsilon: 1") -> str:
    return spec_text(columns, statistics, privacy=f"unit: row, {privacy}", dataset="d")


_XC = "  x: {type: int, bounds: [0, 2]}\n  c: {type: category, categories: [a, b]}\n"
