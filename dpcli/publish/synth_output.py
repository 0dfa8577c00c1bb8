"""What ``dpcli synth`` publishes (issue 27), all made from released values only: the synthetic CSV (codes sampled
from the model turned into the declared domain's values), the table of noisy marginals it was fitted to, and the
sidecar naming every public parameter.

Values only ever come from the spec: a category's declared keys, a bool's ``false``/``true``, and for a numeric
column a point of the column's grid inside the code's declared bin and inside the column's bounds (``values:
uniform``, ``low`` or ``mid``); a kept missing code is an empty cell. Which value a row gets within its bin is drawn
from a generator keyed by the seed stored with the measurements (post-processing: nothing it touches is private), read
as raw 64-bit words (never numpy's distribution methods, whose streams may change between numpy versions), so a
re-run writes the same bytes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcli.core.accounting import decimal_places, format_decimal, format_exact
from dpcli.errors import InternalError
from dpcli.plan.bins import bin_label
from dpcli.specs.model import Bins, Column, Spec, SynthColumn

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Measured", "SyntheticWriter", "code_labels", "grid_range", "marginals_csv", "synthetic_csv", "values_key"]

MISSING_TEXT = ""  # a kept missing code's cell: empty, as a missing cell of the input is


@dataclass(frozen=True)
class Measured:
    """One published noisy marginal: the synth columns it is over (their indices), its noisy integer counts in
    row-major code order (the first column slowest) and its noise's variance σ²."""

    columns: tuple[int, ...]
    counts: np.ndarray  # int64
    sigma2: Fraction
    maps: tuple[np.ndarray, ...] | None = None  # a pair measured over compressed codes: each column's code map


def compressed_labels(labels: list[str], code_map: np.ndarray | None) -> list[str]:
    """The labels of a column's compressed codes: a kept code's own, the merged code's as its codes' labels joined by
    '|' (MST's domain compression, dpcli.postprocess.synth_model.compress_domain)."""
    if code_map is None:
        return labels
    size = int(code_map.max()) + 1 if code_map.size else 0
    groups: list[list[str]] = [[] for _ in range(size)]
    for label, code in zip(labels, code_map.tolist(), strict=True):
        groups[code].append(label)
    return ["|".join(g) for g in groups]


def code_labels(column: Column, synth_column: SynthColumn) -> list[str]:
    """Each code's label, in code order: declared keys, a bin's interval ('[17..25)'), then '' for a kept missing."""
    if column.numeric:
        bins = _bins(synth_column)
        labels = [bin_label(bins, i) for i in range(bins.count)]
    else:
        labels = list(column.keys)
    if synth_column.missing == "keep":
        labels.append(MISSING_TEXT)
    return labels


def _bins(synth_column: SynthColumn) -> Bins:
    if synth_column.bins is None:  # the spec's loader refuses a numeric synth column without bins
        raise InternalError(f"synth column {synth_column.name!r} has no bins")
    return synth_column.bins


def grid_range(column: Column, bins: Bins, i: int) -> tuple[int, int]:
    """The grid points (integers k, value k·precision) of bin i inside the column's bounds: [low, high]. The bin is
    [e_i, e_{i+1}), so k ≥ ceil(e_i/p) and k ≤ ceil(e_{i+1}/p) − 1, as the engine bins (dpcli.engine.cells.bin_index).
    A bin holding no in-bounds point (the spec's loader refuses one) gives the nearest bound: still a declared value."""
    p = column.grid_step
    lo, hi = column.grid_bounds
    low = max(math.ceil(bins.edge(i) / p), lo)
    high = min(math.ceil(bins.edge(i + 1) / p) - 1, hi)
    if low > high:
        low = high = min(max(low, lo), hi)
    return low, high


def _grid_points(column: Column, synth_column: SynthColumn, codes: np.ndarray, words: np.random.PCG64) -> np.ndarray:
    """A grid point for each row's bin code (int64, in grid units): uniform among the bin's in-bounds points, its
    least one, or the one nearest its middle (ties: the lower), as ``values:`` says."""
    bins = _bins(synth_column)
    ranges = [grid_range(column, bins, i) for i in range(bins.count)]
    low = np.array([r[0] for r in ranges], dtype=np.int64)
    high = np.array([r[1] for r in ranges], dtype=np.int64)
    known = codes < bins.count  # a kept missing code has no value
    safe = np.where(known, codes, 0)
    if synth_column.values == "low":
        return low[safe]
    if synth_column.values == "mid":
        p = column.grid_step
        mids = []
        for i, (a, b) in enumerate(ranges):
            middle = (bins.edge(i) + bins.edge(i + 1)) / 2 / p
            mids.append(min(max(math.ceil(middle - Fraction(1, 2)), a), b))
        return np.array(mids, dtype=np.int64)[safe]
    # uniform: one raw 64-bit word per row, whatever its code, taken modulo the bin's span (a bias below
    # span / 2**64: post-processing only, and negligible)
    span = (high - low + 1)[safe].astype(np.uint64)
    return low[safe] + (words.random_raw(len(codes)).astype(np.uint64) % span).astype(np.int64)


def _value_texts(column: Column, points: np.ndarray) -> pl.Series:
    """The exact decimal text of k·precision for each grid point k (the column's grid: '41', '0.25', '-3.5')."""
    import polars as pl

    from dpcli.publish.columns import scaled_text

    p = column.grid_step
    digits = decimal_places(p.denominator)
    if digits is None:  # a precision like 1/3: no finite decimal; the text the table would give such a value
        return pl.Series([format_decimal(int(k) * p) for k in points.tolist()], dtype=pl.String)
    multiplier = int(p * 10**digits)
    # k·p = k·multiplier / 10**digits, formed in 128 bits: k is up to 2^53 grid steps, the multiplier up to 10^digits,
    # so the product can pass int64 (a precision of 1/32 and bounds of 2·10^14 did: it wrapped, printing values out
    # of their bin and bounds)
    scaled = pl.lit(pl.Series(points.astype(np.int64), dtype=pl.Int64)).cast(pl.Int128) * pl.lit(multiplier,
                                                                                                dtype=pl.Int128)
    return pl.select(scaled_text(scaled, digits)).to_series()


class SyntheticWriter:
    """The synthetic file, written a block of rows at a time: a header of the synth columns' names, then one line
    per row of codes (rows × columns, each a code of its column), every cell a value of the declared domain. Values
    within bins come from one generator per column keyed by ``key``, read in row order, so the bytes do not depend on
    how the rows are cut into blocks; memory is one block's, whatever the row count."""

    def __init__(self, spec: Spec, key: bytes) -> None:
        import polars as pl

        from dpcli.publish.columns import csv_texts

        self.spec = spec
        self.synth = _synth(spec)
        self.columns = [spec.columns[sc.name] for sc in self.synth.columns]
        self.sizes = [len(code_labels(c, sc)) for c, sc in zip(self.columns, self.synth.columns, strict=True)]
        self.labels = [None if c.numeric else csv_texts(pl.Series(code_labels(c, sc), dtype=pl.String))
                       for c, sc in zip(self.columns, self.synth.columns, strict=True)]
        self.words = [np.random.PCG64(int.from_bytes(hashlib.sha256(key + j.to_bytes(4, "big")).digest(), "big"))
                      for j in range(len(self.columns))]

    def header(self) -> bytes:
        from dpcli.publish.columns import csv_field

        return (",".join(csv_field(sc.name) for sc in self.synth.columns) + "\n").encode("utf-8")

    def block(self, codes: np.ndarray) -> bytes:
        import polars as pl

        if codes.ndim != 2 or codes.shape[1] != len(self.columns):
            raise InternalError("synthetic codes of the wrong shape")
        if not len(codes):
            return b""
        texts: dict[str, pl.Series] = {}
        for j, (column, sc) in enumerate(zip(self.columns, self.synth.columns, strict=True)):
            col = codes[:, j].astype(np.int64)
            size = self.sizes[j]
            if int(col.min()) < 0 or int(col.max()) >= size:
                raise InternalError(f"synthetic code outside column {sc.name!r}'s domain")
            name = f"c{j}"
            labels = self.labels[j]
            if labels is None:  # numeric: a grid point in the code's bin (a kept missing code: an empty cell)
                values = _value_texts(column, _grid_points(column, sc, col, self.words[j]))
                if sc.missing == "keep":
                    values = pl.select(pl.when(pl.lit(pl.Series(col)) == size - 1).then(pl.lit(MISSING_TEXT))
                                       .otherwise(pl.lit(values))).to_series()
                texts[name] = values.alias(name)
            else:
                texts[name] = labels.gather(pl.Series(col, dtype=pl.UInt32)).alias(name)
        # every text is already a CSV field (keys quoted where needed, numbers never): written as they are
        return pl.DataFrame(texts).write_csv(include_header=False, quote_style="never", line_terminator="\n").encode(
            "utf-8")


def synthetic_csv(spec: Spec, codes: np.ndarray, key: bytes) -> bytes:
    """The whole synthetic file for ``codes`` at once (SyntheticWriter's header and one block)."""
    writer = SyntheticWriter(spec, key)
    return writer.header() + writer.block(codes)


def marginals_csv(spec: Spec, measured: Sequence[Measured]) -> bytes:
    """The noisy marginals the synthetic file was fitted to, one line per cell: ``marginal`` (its columns joined by
    ``*``), up to two (column, value) pairs, the noisy count and its noise's variance. The table users can
    re-estimate from."""
    import polars as pl

    from dpcli.publish.columns import csv_field, csv_texts

    synth = _synth(spec)
    lines = ["marginal,column_1,value_1,column_2,value_2,noisy_count,noise_variance"]
    for m in measured:
        names = [synth.columns[i].name for i in m.columns]
        maps = m.maps if m.maps is not None else (None,) * len(m.columns)
        labels = [compressed_labels(code_labels(spec.columns[n], synth.columns[i]), code_map)
                  for n, i, code_map in zip(names, m.columns, maps, strict=True)]
        sizes = [len(x) for x in labels]
        if int(np.prod(sizes)) != len(m.counts):
            raise InternalError(f"marginal {'*'.join(names)} has {len(m.counts)} counts for {np.prod(sizes)} cells")
        grids = np.unravel_index(np.arange(len(m.counts)), sizes)
        parts: list[pl.Series] = [pl.Series([csv_field("*".join(names))] * len(m.counts), dtype=pl.String)]
        for k in range(2):
            if k < len(names):
                keys = csv_texts(pl.Series(labels[k], dtype=pl.String))
                parts.append(pl.Series([csv_field(names[k])] * len(m.counts), dtype=pl.String))
                parts.append(keys.gather(pl.Series(grids[k], dtype=pl.UInt32)))
            else:
                parts.extend([pl.Series([""] * len(m.counts), dtype=pl.String)] * 2)
        parts.append(pl.Series(m.counts, dtype=pl.Int64).cast(pl.String))
        parts.append(pl.Series([format_exact(m.sigma2)] * len(m.counts), dtype=pl.String))
        frame = pl.DataFrame({f"p{i}": s for i, s in enumerate(parts)})
        lines.extend(frame.select(pl.concat_str(list(frame.columns), separator=",")).to_series().to_list())
    return ("\n".join(lines) + "\n").encode("utf-8")


def values_key(seed: bytes) -> bytes:
    """The key of the generator that places values within their bins: derived from the stored seed, apart from the
    one the model samples codes with."""
    return hashlib.sha256(b"dpcli synth values\0" + seed).digest()


def _synth(spec: Spec) -> Any:
    if spec.synth is None:
        raise InternalError("a synth output is made for a spec with synth:")
    return spec.synth
