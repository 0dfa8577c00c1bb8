"""The release store's form of a table: what the ledger keeps of a paid release and reads back for a re-issue.

Labels are kept as their generators (keys, grid) and integer columns packed (compressed little-endian integers in
base64 pieces), so a 10^7-cell histogram stores in a few MB. Reading a stored table gives the same table, so the same
output bytes; a table stored by dpcli 0.2 (every cell as text, or format 2) is re-issued in contract 0.2's layout.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from dpcli.core.accounting import format_exact, parse_exact
from dpcli.publish.columns import Blank, GridLabels, Ints, KeyLabels, LazyColumn, Masked, Texts
from dpcli.publish.table import CONTRACT, LEGACY_CONTRACT, Block, Table
from dpcli.specs.model import GridBins

# Cells per compressed piece of a packed column in the release store (a reader decodes piece by piece).
PACK_CHUNK = 1 << 20
# The release store's table format. dpcli 0.2 wrote JSON without this key (every cell as text), then format 2
# (both still read, and re-issued in contract 0.2's layout); format 3 adds kind, column and the bin edges.
STORE_FORMAT = 3
LEGACY_STORE_FORMAT = 2


def encode_table(table: Table) -> bytes:
    """The table as kept in the release store: JSON, labels as their generators (keys, grid) and integer
    columns packed (compressed little-endian integers in base64 pieces). A 10^7-cell histogram stores in a
    few MB and ~0.2 s instead of ~500 MB of text. Reading it gives the same table, so the same output bytes."""
    doc = {
        "format": STORE_FORMAT if table.contract == CONTRACT else LEGACY_STORE_FORMAT,
        "dimensions": list(table.dimensions),
        "with_rho": table.with_rho,
        "with_bins": table.with_bins,
        "blocks": [_block_doc(b) for b in table.blocks],
    }
    if table.with_flag:
        doc["with_flag"] = True
    if table.levels_as_numbers:  # absent from tables stored before issue 25: their levels stay JSON strings
        doc["levels_as_numbers"] = True
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_table(data: bytes) -> Table:
    """A stored table: this version's format, or dpcli 0.2's (every cell as text, or format 2), which is
    re-issued in contract 0.2's layout (no kind, column or bin edges; labels '[lo, hi)'), the bytes first
    written: a re-issue never changes what a paid release published."""
    doc = json.loads(data)

    def exact(x: str | None) -> Fraction | None:
        return None if x is None else parse_exact(x)

    if doc.get("format") is None:  # dpcli 0.2
        blocks = tuple(
            Block(
                b["statistic"], exact(b["epsilon"]), b["labels"], b["value"], b["ci_low"], b["ci_high"],
                exact(b.get("rho")),
            )
            for b in doc["blocks"]
        )
    elif doc["format"] in (LEGACY_STORE_FORMAT, STORE_FORMAT):
        blocks = tuple(_block_from_doc(b, exact) for b in doc["blocks"])
    else:
        raise ValueError("stored table of an unknown format")
    contract = CONTRACT if doc.get("format") == STORE_FORMAT else LEGACY_CONTRACT
    return Table(
        tuple(doc["dimensions"]), blocks, bool(doc.get("with_rho")), bool(doc.get("with_bins")), contract,
        bool(doc.get("with_flag")), bool(doc.get("levels_as_numbers")),
    )


def _block_doc(b: Block) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "statistic": b.statistic,
        "epsilon": None if b.epsilon is None else format_exact(b.epsilon),
        "rho": None if b.rho is None else format_exact(b.rho),
        "rows": len(b),
        "labels": {k: v.store() for k, v in b.labels.items()},
        "kind": b.kind,
        "column": b.column,
        "bins": None if b.bin_low is None or b.bin_high is None else [b.bin_low.store(), b.bin_high.store()],
    }
    if b.flag is not None:  # its suppressed cells: value and interval stored as empty texts
        doc["flag"] = b.flag.store()
    v, lo, hi = b.value, b.ci_low, b.ci_high
    if isinstance(v, Ints) and isinstance(lo, Ints) and isinstance(hi, Ints):
        if v.offset == 0 and v.same_array(lo) and v.same_array(hi) and lo.offset == -hi.offset:
            # value -/+ a half-width (counts, sums): one array
            dtype, packed = _pack([v.values])
            doc["numbers"] = {"dtype": dtype, "mult": v.mult, "digits": v.digits, "halfwidth": hi.offset}
            doc["value"] = packed[0]
            return doc
        same_grid = (v.mult, v.digits) == (lo.mult, lo.digits) == (hi.mult, hi.digits)
        if same_grid and v.offset == lo.offset == hi.offset == 0:
            dtype, packed = _pack([v.values, lo.values, hi.values])
            doc["numbers"] = {"dtype": dtype, "mult": v.mult, "digits": v.digits, "halfwidth": None}
            doc["value"], doc["ci_low"], doc["ci_high"] = packed
            return doc
    doc["value"], doc["ci_low"], doc["ci_high"] = (None if isinstance(c, Blank) else list(c) for c in (v, lo, hi))
    return doc


def _block_from_doc(b: dict[str, Any], exact: Callable[[str | None], Fraction | None]) -> Block:
    rows = int(b["rows"])
    labels = {k: _labels_from_doc(v, rows) for k, v in b["labels"].items()}
    numbers = b.get("numbers")
    value: LazyColumn
    low: LazyColumn
    high: LazyColumn
    if numbers is None:
        value, low, high = (Blank(rows) if b[c] is None else Texts(b[c]) for c in ("value", "ci_low", "ci_high"))
    else:
        dtype, mult, digits, k = numbers["dtype"], numbers["mult"], numbers["digits"], numbers["halfwidth"]
        values = _unpack(b["value"], dtype, rows)
        value = Ints(values, 0, mult, digits)
        if k is not None:
            low, high = Ints(values, -k, mult, digits), Ints(values, k, mult, digits)
        else:
            low = Ints(_unpack(b["ci_low"], dtype, rows), 0, mult, digits)
            high = Ints(_unpack(b["ci_high"], dtype, rows), 0, mult, digits)
    flag = None if b.get("flag") is None else Texts(b["flag"])
    if flag is not None:
        hidden = np.array([f == "suppressed" for f in flag.values], dtype=bool)
        if hidden.any():
            value, low, high = (Masked(c, hidden) for c in (value, low, high))
    edges = [_labels_from_doc(e, rows) for e in b["bins"]] if b.get("bins") else [None, None]
    if len(value) != rows or any(len(c) != rows for c in (low, high, *labels.values(), *filter(None, edges))):
        raise ValueError("stored table with columns of different lengths")
    return Block(
        b["statistic"], exact(b["epsilon"]), labels, value, low, high, exact(b.get("rho")), b.get("kind"),
        b.get("column"), bin_low=edges[0], bin_high=edges[1], flag=flag,
    )


def _labels_from_doc(doc: list[str] | dict[str, Any], rows: int) -> LazyColumn:
    if isinstance(doc, list):
        return Texts(doc)
    if "keys" in doc:
        return KeyLabels(doc["keys"], doc["inner"], doc["rows"])
    g = doc["grid"]
    bins = GridBins(parse_exact(g["start"]), parse_exact(g["stop"]), parse_exact(g["step"]))
    # a grid stored without "sep" is dpcli 0.2's: its labels are re-issued as they were first written
    return GridLabels(bins, doc["inner"], doc["rows"], doc.get("sep", ", "), doc.get("part", "label"))


_DTYPES = ((np.int8, "<i1"), (np.int16, "<i2"), (np.int32, "<i4"), (np.int64, "<i8"))


def _pack(arrays: list[np.ndarray]) -> tuple[str, list[list[str]]]:
    """Arrays in the narrowest little-endian integer type holding all of them, zlib-compressed (level 1: noisy
    counts are mostly small, so the bytes shrink ~3x at ~200 MB/s) in base64 pieces of PACK_CHUNK cells."""
    lo = min((int(a.min()) for a in arrays if len(a)), default=0)
    hi = max((int(a.max()) for a in arrays if len(a)), default=0)
    code = next(c for t, c in _DTYPES if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)
    packed = []
    for a in arrays:
        raw = np.ascontiguousarray(a, dtype=np.dtype(code))
        packed.append(
            [
                base64.b64encode(zlib.compress(raw[i : i + PACK_CHUNK].tobytes(), 1)).decode("ascii")
                for i in range(0, max(len(raw), 1), PACK_CHUNK)
            ]
        )
    return code, packed


def _unpack(pieces: list[str], code: str, rows: int) -> np.ndarray:
    if code not in {c for _, c in _DTYPES}:
        raise ValueError("stored table with an unknown integer type")
    try:
        parts = [np.frombuffer(zlib.decompress(base64.b64decode(p)), dtype=np.dtype(code)) for p in pieces]
    except zlib.error:
        raise ValueError("stored table with a damaged packed column") from None
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return values.astype(np.int64)
