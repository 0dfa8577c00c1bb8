"""What a mechanism hands post-processing: the noisy integers of one statistic (``Noisy``), and an open-key entry."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcli.errors import InternalError


@dataclass(frozen=True)
class Noisy:
    """Noisy integers of one statistic (grid units), the input of post-processing.

    Declared cells: one value per declared cell, ``keys`` None. Open keys: one value per *released* entry, and
    ``keys[i]`` = (code over the declared dimensions, open key text) of value i, in the output's order."""

    counts: np.ndarray | None
    sums: np.ndarray | None
    keys: tuple[tuple[int, str], ...] | None = None
    # a quantile: per declared cell and level (increasing), the index of the released candidate (cells x levels)
    choices: np.ndarray | None = None
    # top_k / mode over declared keys: the chosen keys' indices, in rank order (dpcli.mechanisms.topk); open keys:
    # ``keys`` in
    # rank order, with their noisy counts
    chosen: np.ndarray | None = None
    squares: np.ndarray | None = None  # variance/std: the noisy centred sums of squares (their own grid)
    # a quantile with interval: (ci_low, ci_high) as grid offsets from its lowest candidate (cells x levels)
    interval: tuple[np.ndarray, np.ndarray] | None = None


Entry = tuple[int, str]  # (code over the declared dimensions, first slowest; open key text)


# A series' stored piece (issue 26): the noisy integers of every statistic of a period (or a tree's block), as
# canonical JSON. Only noisy values: never raw noise, never an exact aggregate.
_ARRAYS = ("counts", "sums", "choices", "chosen", "squares")


def encode_noisy(noisy: list[Noisy]) -> bytes:
    """The noisy state of a release's statistics as canonical JSON (integers exact, whatever their size)."""
    doc = []
    for nz in noisy:
        if nz.keys is not None:
            raise InternalError("a series has no open keys: its noisy state has declared cells only")
        item: dict[str, Any] = {}
        for name in _ARRAYS:
            array = getattr(nz, name)
            if array is not None:
                item[name] = {"shape": list(np.shape(array)), "values": [int(v) for v in np.ravel(array)]}
        if nz.interval is not None:
            item["interval"] = [{"shape": list(np.shape(a)), "values": [int(v) for v in np.ravel(a)]}
                                for a in nz.interval]
        doc.append(item)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode_noisy(data: bytes) -> list[Noisy]:
    """``encode_noisy``'s state back: int64 arrays where every value fits, else arrays of Python integers."""

    def array(part: dict[str, Any]) -> np.ndarray:
        values = part["values"]
        fits = all(-(2**62) < v < 2**62 for v in values)
        return np.array(values, dtype=np.int64 if fits else object).reshape(part["shape"])

    out = []
    for item in json.loads(data):
        parts = {name: array(item[name]) if name in item else None for name in _ARRAYS}
        interval = None
        if "interval" in item:
            low, high = (array(a) for a in item["interval"])
            interval = (low, high)
        out.append(Noisy(parts["counts"], parts["sums"], None, parts["choices"], parts["chosen"], parts["squares"],
                         interval))
    return out
