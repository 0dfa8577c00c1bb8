"""The audit's neighbour search (``find_neighbours``): candidate rows and persons built from the declared columns
alone, candidate datasets aggregated by the real engine, each pair scored by its exact privacy loss under the plan's
noise, and every target's worst pair kept (dpcli.audit.release_audit's docstring, step 1, says how).
"""

from __future__ import annotations

import decimal
import itertools
import math
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpcli.audit import required
from dpcli.audit.bounds import PRECISION, release_probability
from dpcli.audit.series import SeriesLayout, base_period_text, period_texts
from dpcli.audit.targets import ASSUMED_DELTA, Target, audit_targets, marginal_columns
from dpcli.core.accounting import format_exact
from dpcli.engine import ExactStatistic, aggregate
from dpcli.errors import InternalError
from dpcli.mechanisms import quantiles, topk
from dpcli.plan.bins import bin_label
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.quantiles import INTERVAL_COUNT
from dpcli.specs.grid import candidate_grid, quantile_bins
from dpcli.specs.model import Column, EdgeBins, GridBins, Histogram, Marginal, Quantile, Spec, histogram_bins

BASE_ROWS = 3
# Past this many combinations of a statistic's own columns, each column keeps two values in the combinations (two
# declared keys, the two bounds) and its other values are tried alone: a spec with many by: columns stays quick.
ROW_CAP = 128
MAX_SWEEPS = 8  # coordinate-ascent rounds for the release's pair (each round one engine run per changed row)
WORKERS = 4  # engine runs in flight: polars releases the GIL, and tiny files are dominated by fixed costs
UNPARSEABLE = "n/a"
UNDECLARED = "dpcli-audit-undeclared"
# Open keys (see open_key): the base rows hold key "k", and "s1", "s2", ... in rows (persons) of their own, so a
# candidate can change many entries both datasets hold; candidates add keys only they hold, "a1", "a2", "n1", ...
BASE_KEY, SHARED_KEYS, NEW_KEYS, CANDIDATE_KEYS = "k", "s", "n", "a"
# Person unit: the candidate person's id and the base persons' ids (one row each); the keyed choice of rows uses a
# fixed secret here (a release draws one per run), so a candidate dataset keeps the same rows every time it is read
PERSON_ID = "dpcli-audit-person"
BASE_ID = "dpcli-audit-base"
AUDIT_SECRET = bytes(range(32))
# Candidate persons spread rows over at most this many distinct cells of a statistic (past K + 1 and G + 1 this
# shows nothing more: the person keeps at most K rows and G cells)
MAX_SPREAD = 64

Row = tuple[str, ...]  # one candidate CSV row, in the spec's column order


class RawCell(str):
    """A candidate cell written as these bytes, as they are (unquoted, not encoded): byte-level hostility a writer
    could never produce (an odd number of bytes in UTF-16, a code unit or sequence not valid in the encoding, a stray
    quote). Its text, shown in the report, names the bytes."""

    raw: bytes

    def __new__(cls, raw: bytes) -> RawCell:
        cell = super().__new__(cls, f"<bytes {raw.hex(' ')}>")
        cell.raw = raw
        return cell


# Raw bytes tried in every column of every candidate row set, whatever the encoding (each must stay one record: a
# byte string that would hold the file's line end, in some encoding, is left out there; see _Engine.one_record)
HOSTILE_BYTES = (b"\xff", b"\xc3", b'"', b'"x', b'x"y', b"\xd8", b"\x00\xd8", b"\xd8\x00", b"\xdc\x00\xd8", b"\x00")


Cell = int | tuple[int, str]  # a declared cell's index, or an open-key entry (code over the declared dims, key text)
Person = tuple[tuple[str, ...], ...]  # one candidate person's CSV rows (one row under unit: row)


@dataclass(frozen=True)
class NoisedCell:
    """One cell whose exact value differs between D and D' (grid units; value = grid * unit).

    An open-key entry that exists in one dataset only (``only_in`` "D" or "D'") is released there when its noisy
    count reaches ``threshold`` (with probability ``release_probability``) and never in the other dataset."""

    index: int  # statistic index in the plan
    statistic: str
    component: str  # "count" | "sum" | "squares"
    cell: Cell
    label: str  # the cell's keys and bins ("" for a statistic without cells)
    exact_d: int
    exact_d_prime: int
    unit: Fraction
    only_in: str | None = None  # open keys: "D" | "D'" when the entry exists in that dataset only
    threshold: int | None = None
    release_probability: float = 0.0
    # a quantile level's cell (exact_d, exact_d_prime: the candidates of the best utility): the utilities under D
    # and D', and log P[c | D'] / P[c | D] per candidate c
    utilities: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    llr: tuple[float, ...] = ()


class PersonPair:
    """D's and D''s first rows (the whole candidate under unit: row): person_d is None when D is the base alone."""

    person_d: Person | None
    person_d_prime: Person

    @property
    def row_d(self) -> Row | None:
        return None if self.person_d is None else self.person_d[0]

    @property
    def row_d_prime(self) -> Row:
        return self.person_d_prime[0]


@dataclass(frozen=True)
class Neighbours(PersonPair):
    """The worst pair the search found for a target."""

    target: Target
    person_d: Person | None  # None: D is the base rows alone (add_remove)
    person_d_prime: Person
    pair_loss: Fraction  # in target.loss_unit
    pairs_searched: int
    noised: tuple[NoisedCell, ...]
    description: str
    # top_k parts whose counts differ: (statistic index, D's counts, D''s counts), drawn whole (their law depends on
    # every count)
    choices: tuple[tuple[int, dict[Cell, int], dict[Cell, int]], ...] = ()


# ---------------------------------------------------------------------------------------------------------------
# Candidate rows (from the declared columns only)


# math.ceil and math.floor of a Fraction are exact (integer arithmetic in Fraction.__ceil__ / __floor__)


def _grid_text(column: Column, k: int) -> str:
    return format_exact(k * required.precision(column))


def _bin_starts(column: Column, bins: EdgeBins | GridBins) -> list[int]:
    """The smallest grid value of the first two and the last two bins a clamped value can reach."""
    p = required.precision(column)
    glo, ghi = column.grid_bounds
    n = bins.count

    def start(j: int) -> int | None:
        k = max(math.ceil(bins.edge(j) / p), glo)
        return k if k <= ghi and k < math.ceil(bins.edge(j + 1) / p) else None

    if isinstance(bins, GridBins):  # even bins: jump to the bounds (a grid may have millions of bins)
        first = min(max(0, math.floor((glo * p - bins.start) / bins.step)), n)
        last = max(min(n - 1, math.floor((ghi * p - bins.start) / bins.step)), -1)
    else:
        first, last = 0, n - 1
    out: list[int] = []
    for order in (range(first, last + 1), range(last, first - 1, -1)):
        found = 0
        for j in order:
            k = start(j)
            if k is not None:
                out.append(k)
                found += 1
                if found == 2:
                    break
    return out


def _fields(spec: Spec) -> list[str]:
    """The candidate rows' fields: the declared columns, and a series' period field (dpcli.audit.series)."""
    return [*spec.columns, *([spec.series.period.column] if spec.series is not None else [])]


def _values(spec: Spec) -> dict[str, list[str]]:
    """Per column, the candidate cell texts (a series' period field: dpcli.audit.series.period_texts)."""
    out: dict[str, list[str]] = {}
    if spec.series is not None:
        out[spec.series.period.column] = period_texts(spec.series)
    for name, column in spec.columns.items():
        if column.numeric:
            glo, ghi = column.grid_bounds
            ks = [glo, ghi, (glo + ghi) // 2]
            for stat in spec.statistics:
                if isinstance(stat, Histogram) and stat.column == name and stat.bins is not None:
                    ks += _bin_starts(column, stat.bins)
                if isinstance(stat, Marginal):  # a synth marginal's bins (one per column)
                    ks += [k for c, b in zip(stat.columns, stat.column_bins, strict=True) if c == name and b is not None
                           for k in _bin_starts(column, b)]
            width = ghi - glo
            texts = [_grid_text(column, k) for k in ks]
            texts += [_grid_text(column, glo - width - 1), _grid_text(column, ghi + width + 1), "", UNPARSEABLE]
        elif _is_open(column):
            # the base rows' key, two keys only a candidate holds, one longer than max_length (cut by the engine),
            # missing (empty) and a cell that was not valid UTF-8 (U+FFFD: missing too)
            long_key = "long" + "x" * (column.max_length or 0)
            texts = [
                open_key(column, BASE_KEY), open_key(column, SHARED_KEYS, 1), open_key(column, CANDIDATE_KEYS, 1),
                open_key(column, CANDIDATE_KEYS, 2), long_key, "", "\ufffd",
            ]
        else:
            keys = column.keys
            undeclared = UNDECLARED
            while undeclared in keys:
                undeclared += "-"
            texts = [*keys[:2], *([column.other] if column.other else []), "", undeclared]
        out[name] = list(dict.fromkeys(texts))
    return out


def _is_open(column: Column) -> bool:
    return column.open


def open_key(column: Column, kind: str, j: int = 0) -> str:
    """A key of an open column that stays itself once cut to max_length, distinct for every (kind, j): "s1", "n12"
    (kind letter and number), or one CJK character each when max_length is too short for that."""
    text = f"{kind}{j}" if j else kind
    if len(text) <= (column.max_length or 0):
        return text
    kinds = (BASE_KEY, SHARED_KEYS, NEW_KEYS, CANDIDATE_KEYS)
    return chr(0x4E00 + kinds.index(kind) * (MAX_SPREAD + 1) + j)


def _base_row(spec: Spec) -> Row:
    row = []
    for column in spec.columns.values():
        if column.numeric:
            glo, ghi = column.grid_bounds
            row.append(_grid_text(column, (glo + ghi) // 2))
        else:
            row.append(open_key(column, BASE_KEY) if _is_open(column) else column.keys[0])
    if spec.series is not None:
        row.append(base_period_text(spec.series))
    return tuple(row)


def _set(row: Row, index: dict[str, int], values: dict[str, str]) -> Row:
    out = list(row)
    for name, text in values.items():
        out[index[name]] = text
    return tuple(out)


def _reduced(spec: Spec, name: str) -> list[str]:
    """Two values of a column for a capped product: its bounds, or two declared keys (a series' period field: in
    periods 1 and 2)."""
    if name not in spec.columns:
        return _values(spec)[name][:2]
    column = spec.columns[name]
    if column.numeric:
        glo, ghi = column.grid_bounds
        return [_grid_text(column, glo), _grid_text(column, ghi)]
    if _is_open(column):
        return [open_key(column, BASE_KEY), open_key(column, SHARED_KEYS, 1), open_key(column, CANDIDATE_KEYS, 1)]
    return list(column.keys[:2])


# ---------------------------------------------------------------------------------------------------------------
# The real engine over candidate datasets


# Per statistic, per component role: cell -> exact(D) - exact(base) for declared cells; for an open-key statistic
# its entries as they are (key -> exact count: an entry exists or not, so it is kept whole, never as a difference)
Delta = tuple[dict[str, dict[Cell, int]], ...]


class _Engine:
    """Candidate datasets (the base rows, plus at most one person) aggregated by the real engine, cached by person.

    Each is kept as its exact difference from the base dataset, per statistic and component (cell -> value), so a
    million-cell histogram costs memory once, not once per candidate. A pair's difference is the difference of two
    such differences: exact arithmetic, no assumption about how the engine adds rows up. Open-key statistics keep
    their (few) entries whole: which keys exist is what partition selection protects.

    Under a person unit the CSV has the id field as one more column: the base rows are persons of one row each and
    every candidate row carries PERSON_ID (or a missing id), and the engine keeps rows by the fixed AUDIT_SECRET."""

    def __init__(self, plan: Plan, folder: Path, series: SeriesLayout | None = None) -> None:
        self.plan = plan
        self.folder = folder
        self.series = series
        spec = plan.spec
        self.columns = _fields(spec)
        self.index = {name: j for j, name in enumerate(self.columns)}
        self.person = spec.privacy.person
        self.id_column = spec.id_column or ""
        self.header = self.columns + ([self.id_column] if self.person is not None else [])
        base = _base_row(spec)
        self.spread = _spread(spec)
        # one row per shared key of each open column (its own person): entries a candidate can change in both datasets
        shared = [
            _set(base, self.index, {name: open_key(column, SHARED_KEYS, j)})
            for name, column in spec.columns.items() if column.open for j in range(1, self.spread + 1)
        ]
        if self.person is None:
            self.base_row = base
            self.base_rows = [base] * BASE_ROWS + shared
        else:
            self.index[self.id_column] = len(self.columns)
            self.base_row = (*base, PERSON_ID)
            self.base_rows = [(*row, f"{BASE_ID}-{j}") for j, row in enumerate([base] * BASE_ROWS + shared)]
        self.files = 0
        self._recheck = threading.Lock()
        self._dialect()
        self.base = self._run(None, self._name())
        self.deltas: dict[Person, Delta] = {}
        self.open = [sp.selection is not None for sp in plan.statistics]
        base_delta = self._delta(self.base)
        self.empty: Delta = tuple(
            base_delta[i] if self.open[i] else {c.role: base_delta[i][c.role] if c.role == "choice" else {}
                                                for c in sp.components}
            for i, sp in enumerate(plan.statistics)
        )

    def _name(self) -> Path:
        self.files += 1
        return self.folder / f"{self.files}.csv"

    def _dialect(self) -> None:
        """How candidate files are written: in the spec's dialect (``csv:``), so that the engine reads them as it
        reads the spec's input: its delimiter, encoding (UTF-16 with a BOM for ``utf-16``), header line or declared
        field names, and line end."""
        dialect = self.plan.spec.csv
        self.delimiter = dialect.delimiter or ","  # the candidate files are named *.csv: a comma unless declared
        self.codec = {"utf-16": "utf-16-le"}.get(dialect.encoding, dialect.encoding)
        self.bom = b"\xff\xfe" if dialect.encoding == "utf-16" else b""
        self.eol = "\r" if dialect.line_end == "cr" else "\n"
        self.term = self.eol.encode(self.codec)
        names = self.plan.spec.field_names
        self.fields = list(names) if names is not None else list(self.header)
        self.header_line = None if names is not None else self._line(tuple(self.header), self.header)

    def _line(self, row: Row, fields: list[str] | None = None) -> bytes:
        """One record's bytes, line end excluded: its fields in the file's order (a field the audit does not fill
        is empty), quoted where a writer would quote them; a RawCell's bytes as they are."""
        values = dict(zip(self.header, row, strict=True)) if fields is None else dict(zip(fields, row, strict=True))
        out = []
        for name in self.fields if fields is None else fields:
            text = values.get(name, "")
            if isinstance(text, RawCell):
                out.append(text.raw)
                continue
            if any(ch in text for ch in (self.delimiter, '"', "\r", "\n")):
                text = '"' + text.replace('"', '""') + '"'
            # a character the encoding lacks becomes "?" (an undeclared key), as a writer in that encoding would have it
            out.append(text.encode(self.codec, "replace"))
        return self.delimiter.encode(self.codec).join(out)

    def one_record(self, row: Row) -> bool:
        """The row's bytes hold no line end of the file (UTF-16: its code unit at any offset), so it is one record."""
        line = self._line(row)
        return self.term not in line and (self.codec.startswith("utf-16") or b"\n" not in line)

    def _run(self, person: Person | None, path: Path) -> list[ExactStatistic]:
        # the candidate's rows first: a record whose bytes reached the records after it would show there
        rows = [*(person or ()), *self.base_rows]
        lines = ([] if self.header_line is None else [self.header_line]) + [self._line(row) for row in rows]
        path.write_bytes(self.bom + self.term.join(lines) + self.term)
        if self.series is not None:  # piece by piece (dpcli.audit.series)
            field = self.index[self.series.field]
            texts = None if person is None else [row[field] for row in person]
            if self.person is None:
                return self.series.aggregate(path, texts)
            exact = self.series.aggregate(path, texts, AUDIT_SECRET)
            if person is not None and texts is not None:
                kept = self.series.within(texts)
                if not all(kept):  # the same dataset with only the person's rows in the audited period
                    own = tuple(row for row, k in zip(person, kept, strict=True) if k)
                    alone = self.base if not own else self._run(own, path.with_name(f"{path.stem}-own.csv"))
                    if own:
                        with self._recheck:  # load() names every file before its workers start: only they count here
                            self.files += 1
                    self.series.check_within(exact, alone, texts)
            return exact
        if self.person is None:
            return aggregate(self.plan, path)
        return aggregate(self.plan, path, secret=AUDIT_SECRET)

    def load(self, persons: Iterable[Person]) -> None:
        todo = [p for p in dict.fromkeys(persons) if p not in self.deltas]
        if not todo:
            return
        jobs = [(p, self._name()) for p in todo]
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            results = list(pool.map(lambda job: self._run(*job), jobs))
        for person, exact in zip(todo, results, strict=True):
            self.deltas[person] = self._delta(exact)

    def _delta(self, exact: list[ExactStatistic]) -> Delta:
        out = []
        for sp, e, b in zip(self.plan.statistics, exact, self.base, strict=True):
            parts: dict[str, dict[Cell, int]] = {}
            if sp.selection is not None:
                if e.keys is None:
                    raise InternalError(f"statistic {sp.statistic.name}: open keys aggregated without their entries")
                parts["count"] = {(int(code), text): int(n) for (code, text), n in zip(e.keys, e.counts.tolist(),
                                                                                     strict=True)}
                out.append(parts)
                continue
            for comp in sp.components:
                if comp.role == "choice":  # a top_k: the whole count vector (its law depends on every count)
                    parts["choice"] = dict(enumerate(int(v) for v in e.counts.tolist()))
                    continue
                # a quantile's levels all read the engine's bins (counts); their utilities follow (_quantile_cells)
                part = "count" if comp.mechanism == "exponential" else comp.role
                now, base = _exact_part(self.plan, sp, e, part), _exact_part(self.plan, sp, b, part)
                # a sum component exists only in a statistic whose exact values carry sums
                if now is None or base is None:
                    raise InternalError(f"statistic {sp.statistic.name}: no exact values for its {part} part")
                changed = np.flatnonzero(np.asarray(now != base, dtype=bool))
                parts[comp.role] = {int(c): int(now[c]) - int(base[c]) for c in changed.tolist()}
            out.append(parts)
        return tuple(out)

    def cell_label(self, i: int, cell: Cell) -> str:
        """A noised cell's keys and bins; in a series, its piece first."""
        sp = self.plan.statistics[i]
        if isinstance(sp.statistic, Marginal) and isinstance(cell, int):
            return _marginal_label(self.plan.spec, sp.statistic, cell)
        if self.series is None or not isinstance(cell, int):
            return _cell_label(sp, cell)
        piece, inner = self.series.piece_of(i, cell)
        label = _cell_label(self.series.family(i), inner)
        return f"{piece}: {label}" if label else piece

    def delta(self, person: Person | None) -> Delta:
        return self.empty if person is None else self.deltas[person]

    def exact(self, i: int, role: str, cell: Cell, person: Person | None) -> int:
        if self.open[i] or role == "choice":  # held whole
            return self.delta(person)[i][role].get(cell, 0)
        sp = self.plan.statistics[i]
        exact = _exact_part(self.plan, sp, self.base[i], role)
        # a declared cell of a noised part: a quantile level's cells are its utilities (_quantile_noised)
        if sp.component(role).mechanism == "exponential" or exact is None or not isinstance(cell, int):
            raise InternalError(f"statistic {sp.statistic.name}: no exact value of its {role} part per cell")
        base = int(exact[cell])
        return base + self.delta(person)[i][role].get(cell, 0)


def _exact_part(plan: Plan, sp: StatisticPlan, e: ExactStatistic, role: str) -> np.ndarray | None:
    """The exact values a part is noised on: a quantile's interval count reads the rows with a value per cell, the sum
    of its bins (as dpcli.mechanisms.noise.draw_quantiles does); every other part its own vector."""
    if role == INTERVAL_COUNT:
        stat = required.quantile(sp)
        width = quantile_bins(stat, plan.spec.columns[stat.column])
        per_cell: np.ndarray = np.asarray(e.counts, dtype=np.int64).reshape(-1, width).sum(axis=1)
        return per_cell
    return e.part(role)


def _difference(d1: dict[Cell, int], d2: dict[Cell, int]) -> dict[Cell, int]:
    out = dict(d2)
    for cell, v in d1.items():
        w = out.get(cell, 0) - v
        if w:
            out[cell] = w
        else:
            out.pop(cell, None)
    return out


def _shared_difference(d1: dict[Cell, int], d2: dict[Cell, int]) -> dict[Cell, int]:
    """Open keys: the count differences of the entries both datasets hold (the others are selection's business)."""
    return {k: d2[k] - v for k, v in d1.items() if k in d2 and d2[k] != v}


def _quantile_cells(
    plan: Plan, base: list[ExactStatistic], i: int, role: str, d1: dict[Cell, int], d2: dict[Cell, int]
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(cell of by:, utilities under D, under D') of a quantile level, for the cells whose bins differ: the counts
    are the base dataset's plus each side's exact difference (dpcli.plan.quantiles reads the bins as a release does)."""
    sp = plan.statistics[i]
    stat = required.quantile(sp)
    column = plan.spec.columns[stat.column]
    _, spacing, m = candidate_grid(column, stat.step)
    width = quantile_bins(stat, column)
    level = stat.levels[[c.role for c in sp.components].index(role)]
    out = []
    changed = [cell for cell in _difference(d1, d2) if isinstance(cell, int)]  # declared cells: bin indices
    for k in sorted({cell // width for cell in changed}):
        sides = []
        for d in (d1, d2):
            counts = np.asarray(base[i].counts[k * width:(k + 1) * width], dtype=np.int64).copy()
            for cell, v in d.items():
                if isinstance(cell, int) and k * width <= cell < (k + 1) * width:
                    counts[cell - k * width] += v
            lt, _, gt = quantiles.rank_counts(counts.reshape(1, -1), spacing, m)
            sides.append(quantiles.utilities(lt[0], gt[0], level))
        out.append((k, sides[0], sides[1]))
    return out


def _quantile_loss(plan: Plan, base: list[ExactStatistic], i: int, role: str, d1: dict[Cell, int],
                   d2: dict[Cell, int]) -> tuple[Fraction, int]:
    """A quantile level's pure-ε loss between two datasets: permute-and-flip's (as the exponential mechanism's)
    2 max_c |Δu(c)| / t, summed over the cells of by: that differ (a row leaving one cell and joining another moves
    both); and those cells."""
    scale = required.scale(plan.statistics[i].component(role))
    cells = _quantile_cells(plan, base, i, role, d1, d2)
    moved = sum(int(np.abs(u1 - u2).max(initial=0)) for _, u1, u2 in cells)
    return Fraction(2 * moved) / scale, len(cells)


def _pair_loss(
    plan: Plan, target: Target, a: Delta, b: Delta, base: list[ExactStatistic]
) -> tuple[Fraction, int]:
    """The target's privacy loss between two candidate datasets under the plan's noise, and the cells that differ.
    For an open-key statistic the loss is that of the entries both hold (``_selection_delta`` covers the rest).
    A quantile level (``base``: the base dataset's exact values, needed for its utilities) counts its pure ε, which
    in zCDP is ε²/2 (permute-and-flip is pure ε-DP; it is not claimed bounded-range)."""
    if target.loss_unit == "δ":
        return _selection_delta(plan, target, a, b)
    eps: dict[int, Fraction] = {}
    rho = Fraction(0)
    cells = 0
    for i, role in target.parts:
        sp = plan.statistics[i]
        if isinstance(sp.statistic, Quantile) and role != INTERVAL_COUNT:  # a level (the count: below)
            level_eps, level_cells = _quantile_loss(plan, base, i, role, a[i][role], b[i][role])
            cells += level_cells
            if target.loss_unit == "ε":
                eps[i] = eps.get(i, Fraction(0)) + level_eps
            else:
                rho += level_eps * level_eps / 2
            continue
        if sp.selection is not None:
            diff = _shared_difference(a[i][role], b[i][role])
            cells += len(a[i][role].keys() ^ b[i][role].keys())
        else:
            diff = _difference(a[i][role], b[i][role])
        if not diff:
            continue
        cells += len(diff)
        comp = sp.component(role)
        if comp.mechanism == "exponential":
            # a top_k's loss: the largest |log P_D'(o) - log P_D(o)| over its scored outcomes (a pure-ε loss; in a
            # zCDP release's total it counts 0: the draws' ρ is k ε0²/2 by composing the k pure-ε0 draws, not a
            # function of this pair's total ε)
            if target.loss_unit == "ε":
                eps[i] = eps.get(i, Fraction(0)) + Fraction(choice_loss(sp, a[i][role], b[i][role]))
            continue
        if comp.mechanism == "discrete_gaussian":
            rho += Fraction(sum(v * v for v in diff.values())) / (2 * required.variance(comp))
        else:
            eps[i] = eps.get(i, Fraction(0)) + Fraction(sum(abs(v) for v in diff.values())) / required.scale(comp)
    if target.loss_unit == "ε":
        return sum(eps.values(), Fraction(0)), cells
    # zCDP: an eps-DP (Laplace) statistic is eps^2/2-zCDP
    return rho + sum((e * e / 2 for e in eps.values()), Fraction(0)), cells


def count_vector(values: dict[Cell, int]) -> np.ndarray:
    return np.array([values[c] for c in range(len(values))], dtype=np.int64)


def choice_cells(
    sp: StatisticPlan, d: dict[Cell, int], d_prime: dict[Cell, int]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(D's counts, D''s counts) of each cell of by: whose counts differ (the one cell without by:): a top_k draws
    each cell on its own counts, so the others' draws have one law under both."""
    a, b = topk.cells_of(sp, count_vector(d)), topk.cells_of(sp, count_vector(d_prime))
    return [(x, y) for x, y in zip(a, b, strict=True) if bool((x != y).any())]


def choice_z(sp: StatisticPlan, a: np.ndarray, b: np.ndarray, outcomes: np.ndarray) -> np.ndarray:
    """Z = log P[o | D'] - log P[o | D] of one cell's top_k outcomes (rows of ordered keys), its counts ``a`` under D
    and ``b`` under D'."""
    z: np.ndarray = topk.log_probabilities(sp, b, outcomes) - topk.log_probabilities(sp, a, outcomes)
    return z


def choice_loss(sp: StatisticPlan, d: dict[Cell, int], d_prime: dict[Cell, int]) -> float:
    """A top_k pair's pure-ε loss: the largest |Z| over the outcomes ``topk.outcomes_between`` scores in each cell
    that differs. The cells are drawn independently, so Z is the sum of theirs over any combination of their
    outcomes: its largest value is the sum of their largest, its smallest the sum of their smallest."""
    up = down = 0.0
    for a, b in choice_cells(sp, d, d_prime):
        z = choice_z(sp, a, b, topk.outcomes_between(sp, a, b))
        up, down = up + float(z.max(initial=0.0)), down + float((-z).max(initial=0.0))
    return max(up, down)

def _one_sided(plan: Plan, target: Target, a: Delta, b: Delta) -> tuple[decimal.Decimal, decimal.Decimal, int]:
    """(P[D releases an entry D' lacks], P[D' releases one D lacks], how many such entries), over the target's
    open-key statistics."""
    ctx = PRECISION
    stay_d, stay_dp, n = decimal.Decimal(1), decimal.Decimal(1), 0
    for i, role in target.parts:
        sp = plan.statistics[i]
        if sp.selection is None:
            continue
        scale = required.scale(sp.component(role))
        ea, eb = a[i][role], b[i][role]
        for key in ea.keys() ^ eb.keys():
            n += 1
            if key in ea:
                stay_d = ctx.multiply(stay_d, ctx.subtract(1, release_probability(ea[key], sp.selection.threshold,
                                                                                  scale)))
            else:
                stay_dp = ctx.multiply(stay_dp, ctx.subtract(1, release_probability(eb[key], sp.selection.threshold,
                                                                                    scale)))
    return ctx.subtract(1, stay_d), ctx.subtract(1, stay_dp), n


def _selection_delta(plan: Plan, target: Target, a: Delta, b: Delta) -> tuple[Fraction, int]:
    """A selection target's pair loss: the larger of the chances that one dataset releases a key the other lacks
    (exact to 40 digits, as a Fraction), and how many entries exist in one dataset only."""
    p_d, p_dp, n = _one_sided(plan, target, a, b)
    return Fraction(max(p_d, p_dp)), n


# ---------------------------------------------------------------------------------------------------------------
# The search


@dataclass
class _Best:
    loss: Fraction = Fraction(-1)
    cells: int = 0
    pair: tuple[Person | None, Person] | None = None
    searched: int = 0

    def offer(self, loss: Fraction, cells: int, pair: tuple[Person | None, Person]) -> bool:
        self.searched += 1
        if loss > self.loss or (loss == self.loss and cells < self.cells):
            self.loss, self.cells, self.pair = loss, cells, pair
            return True
        return False


def _statistic_rows(spec: Spec, sp: StatisticPlan, values: dict[str, list[str]], eng: _Engine) -> list[Row]:
    stat = sp.statistic
    # a series' period field is one of every statistic's own columns: a row in each period, and moving between them
    period = [spec.series.period.column] if spec.series is not None else []
    own = list(dict.fromkeys((*stat.by, *([stat.column] if stat.column else []), *marginal_columns(stat), *period)))
    choices = [values[c] for c in own]
    if math.prod(len(c) for c in choices) > ROW_CAP:
        choices = [_reduced(spec, c) for c in own]
    rows = [_set(eng.base_row, eng.index, dict(zip(own, combo, strict=True))) for combo in itertools.product(*choices)]
    # every column alone, the statistic's own ones included (their values left out of a capped product)
    rows += [_set(eng.base_row, eng.index, {c: v}) for c in eng.columns for v in values[c]]
    # and raw bytes in each column, where they leave the row one record
    hostile = [_set(eng.base_row, eng.index, {c: RawCell(raw)}) for c in eng.columns for raw in HOSTILE_BYTES]
    rows += [row for row in hostile if eng.one_record(row)]
    return list(dict.fromkeys(rows))


def _spread(spec: Spec) -> int:
    """How many cells a candidate person spreads rows over: one past K and G (two under unit: row, for a row moving
    between two entries both datasets hold), at most MAX_SPREAD."""
    person = spec.privacy.person
    if person is None:
        return 2
    return min(MAX_SPREAD, max(person.max_rows, person.max_groups or 0) + 1)


def _candidates(spec: Spec, sp: StatisticPlan, values: dict[str, list[str]], eng: _Engine) -> list[Person]:
    """The candidate persons for one statistic: under unit: row each candidate row alone. Under a person unit, whole
    persons built to break each bound: each candidate row alone and repeated past K and R; a person with one row in
    each of many cells (past K and G), and the same with every row repeated past R; for an open key, a person adding
    many keys only they hold (one row and R rows each); and a row with a missing id (empty or U+FFFD)."""
    rows = _statistic_rows(spec, sp, values, eng)
    if eng.person is None:
        return [(r,) for r in rows]
    k, r = eng.person.max_rows, eng.person.max_rows_per_group
    many = max(k, r or 0) + 1
    per_cell = (r or k) + 1  # rows of one person in each cell: one past R (or past K when R is not declared)
    spread = eng.spread
    idx = eng.index[eng.id_column]
    # rows that differ in the statistic's own columns: the product comes first in _statistic_rows
    own = list(dict.fromkeys((*sp.statistic.by, *([sp.statistic.column] if sp.statistic.column else []))))
    distinct = list(dict.fromkeys(rows, None))
    by_cell = list({tuple(row[eng.index[c]] for c in own): row for row in distinct}.values())[:spread]
    persons: list[Person] = [(row,) for row in rows]
    persons += [(row,) * many for row in rows]
    repeated = tuple(row for row in by_cell for _ in range(per_cell))
    persons += [tuple(by_cell), repeated]
    opened = [c for c in own if _is_open(spec.columns[c])]
    for name in opened:
        # new keys only this person holds, as many as the bounds could let through and one more; keys both datasets
        # hold, as many; and both kinds at once
        column = spec.columns[name]
        new = [_set(eng.base_row, eng.index, {name: open_key(column, NEW_KEYS, j)}) for j in range(1, spread + 1)]
        shared = [_set(eng.base_row, eng.index, {name: open_key(column, SHARED_KEYS, j)}) for j in range(1, spread + 1)]
        for keys in (new, shared, shared[: len(shared) // 2] + new[: len(new) // 2 + 1]):
            persons.append(tuple(keys))
            persons.append(tuple(row for row in keys for _ in range(per_cell)))
    filled = _filled(spec, sp, values, eng)
    persons += filled
    if eng.series is not None:
        persons += _elsewhere(eng, values, many, [(rows[0],), tuple(by_cell), repeated, *filled])
    for missing in ("", "\ufffd"):
        persons += [(_set(row, {"id": idx}, {"id": missing}),) for row in rows]
    return list(dict.fromkeys(persons))


def _elsewhere(eng: _Engine, values: dict[str, list[str]], many: int, mixed: list[Person]) -> list[Person]:
    """A series under a person unit: a person with rows outside the audited period (in other periods, before the
    start, after period T, missing, unparseable; each repeated past K and R), alone and added to persons with rows in
    it (``mixed``): their rows elsewhere must change nothing of the period's release (dpcli.audit.series)."""
    series = eng.series
    if series is None:
        raise InternalError("rows outside the audited period of a release without a series")
    texts = values[series.field]
    outside = tuple(_set(eng.base_row, eng.index, {series.field: text})
                    for text, inside in zip(texts, series.within(texts), strict=True) if not inside
                    for _ in range(many))
    return [outside, *(person + outside for person in mixed)]


def _filled(spec: Spec, sp: StatisticPlan, values: dict[str, list[str]], eng: _Engine) -> list[Person]:
    """Persons exactly at the bounds of a statistic with cells: min(R, K) rows in each of min(G, K) cells, at most
    K rows in all (so the engine keeps every one), once per candidate value of the statistic's other columns; for
    an open key, once over keys both datasets hold and once over keys only this person holds. Rows repeated past
    the bounds leave the choice of the kept ones to the keyed hash, which may keep fewer cells than the bounds allow."""
    if eng.person is None:
        raise InternalError("persons at the bounds of a release without a person unit")
    dims = list(sp.statistic.dimensions)
    if not dims:
        return []
    k = eng.person.max_rows
    groups, per_cell = min(k, eng.person.max_groups or k), min(k, eng.person.max_rows_per_group or k)
    own = (*dims, *([sp.statistic.column] if sp.statistic.column else []))
    others = [c for c in dict.fromkeys(own) if c not in dims]
    opened = any(spec.columns[d].open for d in dims)
    out: list[Person] = []
    for template in itertools.product(*(values[c] for c in others)):
        for shared in (True, False) if opened else (True,):
            # the open dimension varies fastest: the base holds its shared keys with the other columns' base values
            order = sorted(dims, key=lambda d: spec.columns[d].open)
            choices = []
            for d in order:
                if spec.columns[d].open:
                    kind = SHARED_KEYS if shared else NEW_KEYS
                    choices.append([open_key(spec.columns[d], kind, j) for j in range(1, eng.spread + 1)])
                else:  # values that fall in a cell, the base row's first
                    cell_values = [v for v in values[d] if v not in ("", UNPARSEABLE) and UNDECLARED not in v]
                    base = eng.base_row[eng.index[d]]
                    choices.append([v for v in cell_values if v == base] + [v for v in cell_values if v != base])
            cells = list(itertools.islice(itertools.product(*choices), groups))
            fixed = dict(zip(others, template, strict=True))
            rows = [_set(eng.base_row, eng.index, {**fixed, **dict(zip(order, cell, strict=True))}) for cell in cells]
            out.append(tuple(row for row in rows for _ in range(per_cell))[:k])
    return out


def _pairs(persons: list[Person], replace: bool) -> Iterable[tuple[Person | None, Person]]:
    if not replace:
        return ((None, p) for p in persons)
    return itertools.combinations(persons, 2)


def _search(plan: Plan, targets: list[Target], eng: _Engine) -> dict[str, _Best]:
    spec = plan.spec
    replace = spec.privacy.neighbours == "replace"
    values = _values(spec)
    best: dict[str, _Best] = {t.label: _Best() for t in targets}
    by_statistic: dict[int, list[Target]] = {}
    for t in targets:
        if t.scope != "release":
            by_statistic.setdefault(t.parts[0][0], []).append(t)
    # a series' statistic has one entry per family and level: its targets (and candidates) sit on the first
    candidate_sets = {i: _candidates(spec, sp, values, eng) for i, sp in enumerate(plan.statistics)
                      if i in by_statistic}
    eng.load(p for persons in candidate_sets.values() for p in persons)
    for i, persons in candidate_sets.items():
        for p1, p2 in _pairs(persons, replace):
            a, b = eng.delta(p1), eng.delta(p2)
            for t in by_statistic[i]:
                best[t.label].offer(*_pair_loss(plan, t, a, b, eng.base), (p1, p2))

    # the release: seeds are every target's worst pair and those pairs merged (unit: row: column by column, in target
    # order, a column already set keeping its value; a person unit: the persons' rows together); under unit: row,
    # coordinate ascent over every column of both rows then starts from the best seed and from the merged one
    release = next(t for t in targets if t.scope == "release")
    found = best[release.label]
    seeds: list[tuple[Person | None, Person]] = []
    merged: list[dict[str, str]] = [{}, {}]
    together: list[list[Row]] = [[], []]
    for t in targets:
        pair = best[t.label].pair
        if t.scope in ("release", "selection") or pair is None or best[t.label].loss <= 0:
            continue
        seeds.append(pair)
        for side, person in enumerate(pair):
            if person is not None:
                together[side].extend(person)
                for c in t.columns:
                    merged[side].setdefault(c, person[0][eng.index[c]])
    if eng.person is None:
        merged_pair: tuple[Person | None, Person] = (
            (_set(eng.base_row, eng.index, merged[0]),) if replace else None,
            (_set(eng.base_row, eng.index, merged[1]),),
        )
    else:
        merged_pair = (
            tuple(dict.fromkeys(together[0])) or (eng.base_row,) if replace else None,
            tuple(dict.fromkeys(together[1])) or (eng.base_row,),
        )
    seeds = list(dict.fromkeys([merged_pair, *seeds]))
    eng.load(p for pair in seeds for p in pair if p is not None)
    for pair in seeds:
        found.offer(*_pair_loss(plan, release, eng.delta(pair[0]), eng.delta(pair[1]), eng.base), pair)
    if found.pair is None:
        raise InternalError("the release's neighbour search offered no pair")
    if eng.person is not None:
        return best
    starts = list(dict.fromkeys([found.pair, merged_pair]))
    for start in starts:
        current = start
        current_loss, _ = _pair_loss(plan, release, eng.delta(current[0]), eng.delta(current[1]), eng.base)
        for _ in range(MAX_SWEEPS):
            moves: list[tuple[Person | None, Person]] = []
            for side in ((0, 1) if replace else (1,)):
                person = current[side]
                if person is None:  # D's person exists under replace, the only case that moves side 0
                    raise InternalError("the release's pair lacks the person it moves")
                row = person[0]
                for c in eng.columns:
                    for v in values[c]:
                        if v != row[eng.index[c]]:
                            new = (_set(row, eng.index, {c: v}),)
                            moves.append((new, current[1]) if side == 0 else (current[0], new))
            eng.load(p for pair in moves for p in pair if p is not None)
            step, step_loss = None, current_loss
            for pair in moves:
                loss, cells = _pair_loss(plan, release, eng.delta(pair[0]), eng.delta(pair[1]), eng.base)
                found.offer(loss, cells, pair)
                if loss > step_loss:
                    step, step_loss = pair, loss
            if step is None:
                break
            current, current_loss = step, step_loss
    return best


def find_neighbours(
    plan: Plan, folder: Path, delta: Fraction | None = None, series: SeriesLayout | None = None,
    datasets: list[CandidateCounts] | None = None,
) -> tuple[list[Neighbours], int]:
    """The search alone (no noise): every target's worst neighbouring pair, and how many datasets the engine ran.

    ``delta`` is only used for the claims of Gaussian targets (default: the spec's, else ``ASSUMED_DELTA``). A series
    (``series``: its layout, whose ``plan`` is ``plan``) is searched over every piece at once. ``datasets`` (unit:
    row, no series): receives every candidate dataset the search aggregated, with its exact counts (a synth audit
    searches its selection over them, dpcli.audit.synth_audit)."""
    spec = plan.spec
    if delta is None:
        delta = spec.privacy.delta if spec.privacy.delta is not None else ASSUMED_DELTA
    targets = audit_targets(plan, delta) if series is None else series.targets(delta)
    eng = _Engine(plan, folder, series)
    best = _search(plan, targets, eng)
    if datasets is not None:
        if eng.person is not None or series is not None:
            raise InternalError("candidate counts are kept for a release with unit: row and no series")
        datasets.append(_candidate_counts(eng))
    out = []
    for t in targets:
        b = best[t.label]
        if b.pair is None:
            raise InternalError(f"target {t.label}: the neighbour search offered no pair")
        p1, p2 = b.pair
        noised: list[NoisedCell] = []
        choices = []
        if b.loss > 0 or b.cells > 0:
            a, c = eng.delta(p1), eng.delta(p2)
            for i, role in t.parts:
                noised.extend(_noised_cells(eng, i, role, a[i][role], c[i][role], p1, p2))
                if role == "choice" and a[i][role] != c[i][role]:
                    choices.append((i, a[i][role], c[i][role]))
        loss = max(b.loss, Fraction(0))
        text = _describe(spec, t, eng, p1, p2, loss, b.searched, noised)
        out.append(Neighbours(t, p1, p2, loss, b.searched, tuple(noised), text, tuple(choices)))
    return out, eng.files


@dataclass(frozen=True)
class CandidateCounts:
    """The search's candidate datasets (the base rows plus at most one candidate row; unit: row, no series), each
    aggregated by the real engine: its exact counts of every statistic of the plan (dpcli.audit.synth_audit reads a
    synth plan's pair marginals from them). ``counts[None]`` is the base rows alone."""

    columns: tuple[str, ...]  # the CSV's columns, the order of each candidate row
    base_row: Row
    base_rows: int
    counts: dict[Person | None, tuple[np.ndarray, ...]]


def _candidate_counts(eng: _Engine) -> CandidateCounts:
    """Every candidate dataset the search aggregated (the base rows alone, and with each candidate row), as each
    statistic's exact counts (its "count" part)."""
    base = tuple(np.asarray(e.counts, dtype=np.int64) for e in eng.base)
    counts: dict[Person | None, tuple[np.ndarray, ...]] = {None: base}
    for person, delta in eng.deltas.items():
        vectors = []
        for i, b in enumerate(base):
            v = b.copy()
            for cell, diff in delta[i]["count"].items():
                if isinstance(cell, int):
                    v[cell] += diff
            vectors.append(v)
        counts[person] = tuple(vectors)
    return CandidateCounts(tuple(eng.columns), eng.base_row, len(eng.base_rows), counts)


def _noised_cells(
    eng: _Engine, i: int, role: str, a: dict[Cell, int], c: dict[Cell, int], p1: Person | None, p2: Person
) -> list[NoisedCell]:
    """The cells of one statistic's part whose exact values differ between D (``a``) and D' (``c``); open-key entries
    one dataset lacks come with their threshold and the chance the other dataset releases them."""
    sp = eng.plan.statistics[i]
    comp = sp.component(role)
    if isinstance(sp.statistic, Quantile) and role != INTERVAL_COUNT:
        return _quantile_noised(eng, i, role, a, c)
    if sp.selection is None:
        return [
            NoisedCell(i, sp.statistic.name, role, cell, eng.cell_label(i, cell), eng.exact(i, role, cell, p1),
                       eng.exact(i, role, cell, p2), comp.unit)
            for cell in sorted(_difference(a, c))
        ]
    scale = required.scale(comp)
    tau = sp.selection.threshold
    out = []
    for key in sorted(a.keys() | c.keys()):
        if key in a and key in c and a[key] == c[key]:
            continue
        only = None if key in a and key in c else ("D" if key in a else "D'")
        p = 0.0 if only is None else float(release_probability(a.get(key, 0) or c.get(key, 0), tau, scale))
        out.append(NoisedCell(i, sp.statistic.name, role, key, _cell_label(sp, key), a.get(key, 0), c.get(key, 0),
                              comp.unit, only, tau if only else None, p))
    return out


def _quantile_noised(eng: _Engine, i: int, role: str, a: dict[Cell, int], c: dict[Cell, int]) -> list[NoisedCell]:
    """A quantile level's cells of by: whose utilities differ, with the log-likelihood ratio of each candidate
    (float64: log P[c | D'] - log P[c | D], each permute-and-flip's output law at the sampler's temperature t,
    ``topk.permute_and_flip_log_pmf``)."""
    plan = eng.plan
    sp = plan.statistics[i]
    stat = required.quantile(sp)
    comp = sp.component(role)
    column = plan.spec.columns[stat.column]
    first, spacing, _ = candidate_grid(column, stat.step)
    t = float(required.scale(comp))

    def log_probs(u: np.ndarray) -> np.ndarray:
        return topk.permute_and_flip_log_pmf(np.array([float(u.max() - v) for v in u]), t)

    out = []
    for k, u1, u2 in _quantile_cells(plan, eng.base, i, role, a, c):
        llr = log_probs(u2) - log_probs(u1)
        best_d, best_dp = (first + int(np.argmax(u)) * spacing for u in (u1, u2))
        out.append(NoisedCell(
            i, stat.name, role, k, eng.cell_label(i, k), best_d, best_dp, column.precision or Fraction(1),
            utilities=(tuple(int(v) for v in u1), tuple(int(v) for v in u2)), llr=tuple(float(v) for v in llr),
        ))
    return out


def _cell_label(sp: StatisticPlan, cell: Cell) -> str:
    stat = sp.statistic
    if not stat.dimensions:
        return ""
    open_dim = sp.selection.dimension if sp.selection is not None else -1
    code, text = cell if isinstance(cell, tuple) else (cell, "")
    sizes = [0 if j == open_dim else len(keys) if keys is not None else histogram_bins(stat).count
             for j, keys in enumerate(sp.dimension_keys)]
    parts = []
    rest = code
    for j in range(len(sizes) - 1, -1, -1):
        keys = sp.dimension_keys[j]
        if j == open_dim:
            parts.append(text)
            continue
        rest, k = divmod(rest, sizes[j])
        parts.append(keys[k] if keys is not None else bin_label(histogram_bins(stat), k))
    return ", ".join(reversed(parts))


def _marginal_label(spec: Spec, stat: Marginal, cell: int) -> str:
    """A synth marginal's cell: each column's key (bool: false, true), bin, or "(missing)" for a kept missing code."""
    codes = []
    rest = cell
    for name, bins, kept in reversed(list(zip(stat.columns, stat.column_bins, stat.kept_missing, strict=True))):
        size = (bins.count if bins is not None else len(spec.columns[name].keys)) + int(kept)
        rest, k = divmod(rest, size)
        codes.append((name, bins, kept, k, size))
    parts = []
    for name, bins, kept, k, size in reversed(codes):
        if kept and k == size - 1:
            parts.append("(missing)")
        else:
            parts.append(bin_label(bins, k) if bins is not None else spec.columns[name].keys[k])
    return ", ".join(parts)


def _show(row: Row, names: list[str], index: dict[str, int]) -> str:
    return ", ".join(f"{n}={row[index[n]] if row[index[n]] != '' else '(empty)'}" for n in names)


def _show_person(eng: _Engine, person: Person, names: list[str]) -> str:
    if len(person) == 1:
        return _show(person[0], names, eng.index)
    distinct = list(dict.fromkeys(person))
    shown = "; ".join(f"{person.count(r)}× {_show(r, names, eng.index)}" for r in distinct[:4])
    return shown + (f"; … {len(distinct) - 4} more distinct rows" if len(distinct) > 4 else "")


def _describe(
    spec: Spec, t: Target, eng: _Engine, p1: Person | None, p2: Person, loss: Fraction, searched: int,
    noised: list[NoisedCell],
) -> str:
    if loss == 0 and not noised:
        return f"none of the {searched} neighbouring pairs searched changes its exact values: nothing to test"
    other = p1[0] if p1 is not None else eng.base_row
    id_name = [eng.id_column] if eng.person is not None else []
    names = [c for c in eng.columns if c in t.columns or any(other[eng.index[c]] != r[eng.index[c]] for r in p2)]
    names += id_name
    unit = "row" if eng.person is None else "person"
    if p1 is None:
        added = f" ({_show_person(eng, p2, names)})" if names else ""
        size = f" of {len(p2)} row(s)" if eng.person is not None else ""
        pair = f"D: {len(eng.base_rows)} {unit}s; D' = D + 1 {unit}{size}{added}"
    else:
        pair = (
            f"D: {len(eng.base_rows)} {unit}s + 1 {unit} ({_show_person(eng, p1, names)}); "
            f"D': that {unit} replaced by ({_show_person(eng, p2, names)})"
        )
    only = [c for c in noised if c.only_in is not None]
    if only:
        pair += f"; {len(only)} key(s) exist in one dataset only"
    u = t.loss_unit
    verdict = "EXCEEDS the claim" if loss > t.claimed_loss else "within the claim"
    if u == "δ":
        return (
            f"{pair}; the worst of {searched} pairs searched: P[a key one dataset lacks is released]="
            f"{float(loss):.6g}, {verdict} (δ={float(t.claimed_loss):.6g})"
        )
    return (
        f"{pair}; the worst of {searched} pairs searched: {u}={float(loss):.6g} under the plan's noise, {verdict} "
        f"({u}={float(t.claimed_loss):.6g})"
    )
