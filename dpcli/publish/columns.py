"""The output table's columns: each produced by row ranges, never all its text at once (a 10^7-row table costs its
arrays, not 10^7 Python strings). dpcli.publish.table lays a table out of them; dpcli.publish.policies masks them."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from dpcli.core.accounting import format_exact
from dpcli.specs.model import GridBins

# polars and numpy are imported inside the functions that format a column (when a table is written or stored):
# `dpcli budget show` never pays for them, nor `dpcli plan`, which builds the label columns without formatting them
if TYPE_CHECKING:
    import numpy as np
    import polars as pl

# A bin's label '[lo..hi)': never a comma, quote or line break, so it needs no quoting (dpcli 0.2: '[lo, hi)')
BIN_SEPARATOR = ".."
# Rows turned into text at a time. A 10^7-row table never exists as Python strings: each chunk is formatted by
# polars (in Rust, on every core) and written before the next one is made, so the text held is ~10-30 MB.
CHUNK_ROWS = 1 << 18
_INT64_SAFE = 2**62  # integers formatted in int64 must stay below this (after offset and multiplier)


# ---------------------------------------------------------------------------------------------------------------
# Columns: one column of a block, produced by row ranges (never all its text at once)


class LazyColumn(Sequence[str]):
    """A column of ``rows`` texts, made on demand for a range of rows.

    ``text(i, j)`` is a polars Series of rows i..j: String, or Int64 where the text is the integer's decimal text
    (polars writes it in Rust). ``csv``/``json`` are the same rows escaped as the csv module / json.dumps would."""

    rows: int

    def __len__(self) -> int:
        return self.rows

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self.rows
        if not 0 <= index < self.rows:
            raise IndexError(index)
        return self.texts(index, index + 1)[0]

    def __iter__(self) -> Iterator[str]:
        for i in range(0, self.rows, CHUNK_ROWS):
            yield from self.texts(i, min(self.rows, i + CHUNK_ROWS))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyColumn | list | tuple):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    # unhashable, as a list is: mypy cannot type the standard idiom
    __hash__ = None  # type: ignore[assignment]

    def texts(self, i: int, j: int) -> list[str]:
        import polars as pl

        return self.text(i, j).cast(pl.String).to_list()

    def text(self, i: int, j: int) -> pl.Series:
        raise NotImplementedError

    def csv(self, i: int, j: int) -> pl.Series:
        return self.text(i, j)

    def json(self, i: int, j: int) -> pl.Series:
        return self.text(i, j)

    def number_json(self, i: int, j: int) -> pl.Series:
        """A number column's rows as JSON values (their decimal text)."""
        return self.text(i, j)

    def store(self) -> list[str] | dict[str, Any] | None:  # a JSON value for the release store
        raise NotImplementedError


class Texts(LazyColumn):
    """Given texts: a 0.2 stored table, numbers that cannot be formatted in int64 (rare: huge sums), or the labels
    of an open-key statistic's released entries (text from the data: any character).

    Escaped by polars, column-wise, into exactly what csv_field and json.dumps(ensure_ascii=False) give for each
    text (tests/mechanisms/test_open_keys.py compares them): a million keys took ~10 s one text at a time, ~0.3 s so."""

    def __init__(self, texts: Sequence[str]):
        self.values = list(texts)
        self.rows = len(self.values)

    def text(self, i: int, j: int) -> pl.Series:
        import polars as pl
        return pl.Series(self.values[i:j], dtype=pl.String)

    def csv(self, i: int, j: int) -> pl.Series:
        return csv_texts(self.text(i, j))

    def json(self, i: int, j: int) -> pl.Series:
        return json_texts(self.text(i, j))

    def store(self) -> list[str]:
        return self.values


class Ints(LazyColumn):
    """Integers written as the decimal text of (value + offset) * mult / 10^digits (trailing zeros dropped).

    Counts: mult 1, digits 0, and the interval's columns share the noisy array with offsets -k and +k. Sums and
    means: the fixed-point grid's step as mult / 10^digits. The builder checks that every number fits int64."""

    def __init__(self, values: np.ndarray, offset: int = 0, mult: int = 1, digits: int = 0):
        self.values = values
        self.offset, self.mult, self.digits = int(offset), int(mult), int(digits)
        self.rows = len(values)

    def text(self, i: int, j: int) -> pl.Series:
        import polars as pl
        s = pl.Series(self.values[i:j], dtype=pl.Int64)
        if self.offset == 0 and self.mult == 1 and self.digits == 0:
            return s
        expr = (pl.lit(s) + self.offset) * self.mult
        return pl.select(scaled_text(expr, self.digits) if self.digits else expr).to_series()

    def same_array(self, other: Ints) -> bool:
        return self.values is other.values and (self.mult, self.digits) == (other.mult, other.digits)


class Blank(LazyColumn):
    """A number column with nothing in it: a top_k's or mode's rows have no interval, nor a quantile's (its accuracy
    is a rank bound, in the plan and the sidecar). CSV: an empty field; JSON: null; stored as null."""

    def __init__(self, rows: int):
        self.rows = int(rows)

    def texts(self, i: int, j: int) -> list[str]:
        return [None] * (min(j, self.rows) - i)  # type: ignore[list-item] # as a dimension that does not apply

    def text(self, i: int, j: int) -> pl.Series:
        import polars as pl
        return pl.repeat("", j - i, dtype=pl.String, eager=True)

    def number_json(self, i: int, j: int) -> pl.Series:
        import polars as pl
        return pl.repeat("null", j - i, dtype=pl.String, eager=True)

    def store(self) -> None:
        return None


class KeyLabels(LazyColumn):
    """Labels of declared keys (or of a few edge bins): row r is keys[(r // inner) % len(keys)], so the product of
    a statistic's dimensions (first dimension slowest) is never materialised."""

    def __init__(self, keys: Sequence[str], inner: int, rows: int):
        self.keys, self.inner, self.rows = tuple(keys), int(inner), int(rows)

    def _codes(self, i: int, j: int) -> np.ndarray:
        import numpy as np

        return (np.arange(i, j, dtype=np.int64) // self.inner) % len(self.keys)

    def _gather(self, texts: list[str], i: int, j: int) -> pl.Series:
        import polars as pl
        return pl.Series(texts, dtype=pl.String).gather(self._codes(i, j))

    def text(self, i: int, j: int) -> pl.Series:
        return self._gather(list(self.keys), i, j)

    def csv(self, i: int, j: int) -> pl.Series:
        return self._gather([csv_field(k) for k in self.keys], i, j)

    def json(self, i: int, j: int) -> pl.Series:
        return self._gather([json.dumps(k, ensure_ascii=False) for k in self.keys], i, j)

    def store(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "inner": self.inner, "rows": self.rows}


class GridLabels(LazyColumn):
    """The bins of an even grid as '[lo..hi)' (or one edge: ``part``): row r is bin (r // inner) % count. Edges are
    formatted in int64 arithmetic on the grid scaled to integers (start, step as integers over 10^digits), by
    polars, chunk by chunk. A grid with a non-decimal step (1/3) or edges past int64 is formatted in Python instead
    (same text)."""

    def __init__(self, bins: GridBins, inner: int, rows: int, sep: str = BIN_SEPARATOR, part: str = "label"):
        self.bins, self.inner, self.rows = bins, int(inner), int(rows)
        self.sep = sep  # '..' (contract 0.3); ', ' re-issues a table stored by dpcli 0.2 as it was first written
        self.part = part  # "label": '[lo..hi)'; "low" / "high": one edge (the bin_low / bin_high number columns)
        self.bin_count = bins.count
        digits = 0
        while (bins.start * 10**digits).denominator != 1 or (bins.step * 10**digits).denominator != 1:
            digits += 1
            if digits > 18:
                break
        self.scaled: tuple[int, int, int] | None = None
        if digits <= 18:
            start, step = int(bins.start * 10**digits), int(bins.step * 10**digits)
            if max(abs(start), abs(start + self.bin_count * step)) < _INT64_SAFE:
                self.scaled = (start, step, digits)

    def _edges(self, first: int, n: int) -> pl.Series:
        """Text of edges first .. first + n - 1 (a String Series)."""
        import polars as pl
        if self.scaled is None:
            return pl.Series([format_exact(self.bins.edge(e)) for e in range(first, first + n)], dtype=pl.String)
        start, step, digits = self.scaled
        edge = pl.lit(start, pl.Int64) + pl.int_range(first, first + n, dtype=pl.Int64) * step
        return pl.select(scaled_text(edge, digits)).to_series()

    def text(self, i: int, j: int) -> pl.Series:
        return self._labels(i, j, '[', ')')

    def csv(self, i: int, j: int) -> pl.Series:
        # '[lo..hi)' needs no quoting; dpcli 0.2's '[lo, hi)' always holds a comma and never a quote: csv.writer
        # quotes it as '"[lo, hi)"' (edges are digits, '-', '.', '/'; nothing to escape)
        if self.part != "label" or "," not in self.sep:
            return self.text(i, j)
        return self._labels(i, j, '"[', ')"')

    def json(self, i: int, j: int) -> pl.Series:
        return self._labels(i, j, '"[', ')"')  # as json.dumps writes it (an edge column is a number_json column)

    def _labels(self, i: int, j: int, before: str, after: str) -> pl.Series:
        import polars as pl
        n = j - i
        if self.inner == 1 and i // self.bin_count == (j - 1) // self.bin_count:
            # consecutive bins (the usual case: the bin is the last dimension): each edge is formatted once
            edges = self._edges(i % self.bin_count, n + 1)
            lo, hi = edges.slice(0, n), edges.slice(1, n)
        else:
            import numpy as np

            b = (np.arange(i, j, dtype=np.int64) // self.inner) % self.bin_count
            first, last = int(b.min()), int(b.max())
            edges = self._edges(first, last - first + 2)
            lo, hi = edges.gather(b - first), edges.gather(b - first + 1)
        if self.part != "label":
            return lo if self.part == "low" else hi
        label = pl.concat_str([pl.lit(before), pl.lit(lo), pl.lit(self.sep), pl.lit(hi), pl.lit(after)])
        return pl.select(label).to_series()

    def store(self) -> dict[str, Any]:
        b = self.bins
        grid = {"start": format_exact(b.start), "stop": format_exact(b.stop), "step": format_exact(b.step)}
        return {"grid": grid, "inner": self.inner, "rows": self.rows, "sep": self.sep, "part": self.part}


def scaled_text(v: pl.Expr, digits: int) -> pl.Expr:
    """Decimal text of the integer expression v / 10**digits, trailing zeros dropped: the text format_exact gives
    for every value, computed by polars."""
    import polars as pl
    if digits == 0:
        return v.cast(pl.String)
    a = v.abs()
    whole, frac = a // 10**digits, a % 10**digits
    frac_text = frac.cast(pl.String).str.zfill(digits).str.strip_chars_end("0")
    return pl.concat_str(
        [
            pl.when(v < 0).then(pl.lit("-")).otherwise(pl.lit("")),
            whole.cast(pl.String),
            pl.when(frac == 0).then(pl.lit("")).otherwise(pl.lit(".") + frac_text),
        ]
    )


def csv_field(text: str) -> str:
    """``text`` as csv.writer writes it inside a row (quoted only where needed), by asking csv.writer itself.

    A carriage return is quoted too: csv.writer quotes only the characters of its line terminator ('\n' here), and
    an unquoted '\r' ends the row for csv.reader and for spreadsheets. Declared keys never held one, but open keys
    are text from the data."""
    buf = io.StringIO()
    quote_all = "\r" in text
    csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL).writerow([text, ""])
    return buf.getvalue()[: -(4 if quote_all else 2)]  # drop the empty second field and the '\n'


def csv_texts(texts: pl.Series) -> pl.Series:
    """``csv_field`` of every text of a String Series: quoted (quotes doubled) when it holds a comma, a quote, a line
    feed or a carriage return, else as it is."""
    import polars as pl
    quoted = pl.lit('"') + pl.col("t").str.replace_all('"', '""', literal=True) + pl.lit('"')
    needs = pl.col("t").str.contains(r'[,"\n\r]')
    return texts.to_frame("t").select(pl.when(needs).then(quoted).otherwise(pl.col("t"))).to_series()


# json.dumps's escapes of the characters below U+0020 (ensure_ascii=False leaves every other character as it is)
_JSON_CONTROL = {chr(c): json.dumps(chr(c)).strip('"') for c in range(0x20)}


def json_texts(texts: pl.Series) -> pl.Series:
    """``json.dumps(text, ensure_ascii=False)`` of every text of a String Series: backslash, quote and the control
    characters escaped as json.dumps escapes them, in quotes."""
    import polars as pl
    body = pl.col("t").str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
    frame = texts.to_frame("t")
    if frame.select(pl.col("t").str.contains(r"[\x00-\x1f]").any()).item():
        for char, escaped in _JSON_CONTROL.items():
            body = body.str.replace_all(char, escaped, literal=True)
    return frame.select(pl.lit('"') + body + pl.lit('"')).to_series()


def as_column(x: LazyColumn | Sequence[str]) -> LazyColumn:
    return x if isinstance(x, LazyColumn) else Texts(x)


class Masked(LazyColumn):
    """A number column with some rows hidden (suppressed cells): empty in CSV, null in JSON, None as row text."""

    def __init__(self, inner: LazyColumn, hidden: np.ndarray):
        import numpy as np

        self.inner, self.hidden, self.rows = inner, np.asarray(hidden, dtype=bool), len(inner)

    def _mask(self, series: pl.Series, i: int, j: int, blank: str) -> pl.Series:
        import polars as pl
        hide = pl.Series(self.hidden[i:j])
        return pl.select(pl.when(hide).then(pl.lit(blank)).otherwise(series.cast(pl.String))).to_series()

    def texts(self, i: int, j: int) -> list[str]:
        inner = self.inner.texts(i, j)
        # a masked row is None, as a Blank's rows are: the column's text type has no None (see Blank.texts)
        return [None if h else t for t, h in zip(inner, self.hidden[i:j], strict=True)]  # type: ignore[misc]

    def text(self, i: int, j: int) -> pl.Series:
        return self._mask(self.inner.text(i, j), i, j, "")

    def csv(self, i: int, j: int) -> pl.Series:
        return self._mask(self.inner.csv(i, j), i, j, "")

    def number_json(self, i: int, j: int) -> pl.Series:
        return self._mask(self.inner.number_json(i, j), i, j, "null")

    def store(self) -> list[str]:
        return ["" if t is None else t for t in self]
