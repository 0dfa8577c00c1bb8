"""Person-level releases (``privacy.unit: {id: FIELD, max_rows: K, ...}``): which rows count, written once.

The rules (docs/spec.md, "Person-level releases"), applied by every engine through this module:

1. A row's person is the raw text of the id field. A missing id (null, empty, or holding U+FFFD: bytes that were
   not UTF-8) is left out (``missing_id: drop``) or makes the row a person of its own (``missing_id: person``).
2. Each row gets h = a keyed hash, under the release's 32-byte secret, of (id, the row's used cells as the engine
   typed them). Per person the K rows with the smallest (h, then the used cells) are kept: never file order, never a
   value. They are chosen once, before any cell is read as missing, and every statistic uses that choice.
3. Per statistic with cells (``by:``, bins, an open key): with ``max_groups`` G, each person keeps the G cells with
   the smallest keyed hash of (id, cell) among the cells their kept rows fall in (a row outside every cell of the
   statistic, such as a missing key or a missing value of a sum, takes no place); with ``max_rows_per_group`` R,
   the R rows with the smallest (h, cells) in each kept cell. A statistic without cells is bounded by K alone.
4. ``count`` counts the selected rows per cell, ``count of: persons`` the distinct persons with a selected row
   there. ``sum``/``mean`` with ``clamp: row`` add up the selected rows' values (each clamped to the bounds, on the
   grid) as at row level; with ``clamp: person`` each person's total in a cell (of clamped rows) is clamped to the
   bounds again, the cell's sum adds those totals and its count is the persons with a value there (a mean's centring
   offset is subtracted from each person's clamped total).
5. An open key is the cell's text cut to ``max_length`` characters; null, empty or U+FFFD text is missing.

Use (the polars engine, the columnar inputs, and Spark's executors alike)::

    rows = PersonRows(plan, secret)
    rows.add(frame)        # any number of times: typed rows of the used columns + the id text as ID_COLUMN
    rows.finish()          # -> list[ExactStatistic], in plan order

Spark partitions the rows by id (every row of a person in one partition), runs one ``PersonRows`` per partition and
adds the partials up: ``exact_from_frames(plan, [rows.cell_frames() for each partition])``. ``cell_frames()``
gives, per statistic in plan order, the partial per-cell totals: ``code`` (Int64, the declared cell code), ``key``
(String; open-key statistics only), ``n`` (Int64) and ``s`` (Int128; sums and means only). Rows with a missing id
(``missing_id: person``) are persons of their own, so they may fall in any partition.

Memory is bounded by the persons, not the rows: each chunk is cut to its K first rows per person at once, and the
rows kept so far are cut again to K per person whenever they have doubled since the last cut; rows with a missing
id that are persons of their own are counted at once and never held.

The keyed hash is polars' seeded ``hash`` (seeds drawn from the secret by BLAKE2b). Measured on 500,000 rows
(an id and three used cells): 0.024 s for polars' hash of the row, 1.19 s for a keyed ``hashlib.blake2b`` of each
row in Python, ~50x slower, which would be most of a release's time. The privacy guarantee does not rest on the
hash's strength: any rule that looks only at the person's own rows bounds their contribution; the secret keeps the
choice from being predictable from the data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dpcli.engine.cells import (
    ExactStatistic,
    Query,
    cell_arrays,
    column_types,
    compact,
    numeric_value,
    recipe,
    used_columns,
)
from dpcli.errors import InputError
from dpcli.plan import Plan, StatisticPlan
from dpcli.spec import PersonUnit, Spec

ID_COLUMN = "#id"  # the id field's text among the typed rows (a declared column's name cannot start with #)
SECRET_BYTES = 32
_PID = "#pid"  # keyed hash of the id: persons are sorted by it (an integer sort, ~4x faster than sorting the text)
_H = "#h"  # keyed hash of the row: its place among the person's rows
_PERSON = "#person"  # the person's number among the rows kept (after the final cut)
_RANK = "#rank"  # the row's place among its person's kept rows: (h, cells) order
_G = "#g"  # keyed hash of (person, cell): the cell's place among the person's cells


@dataclass(frozen=True)
class Seeds:
    """The keyed hashes' seeds, drawn from the release's secret (polars' hash takes one 64-bit seed)."""

    person: int
    row: int
    cell: int

    @classmethod
    def of(cls, secret: bytes) -> Seeds:
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"the person-level secret is {SECRET_BYTES} bytes")
        digest = hashlib.blake2b(b"dpcli person-level seeds", key=secret, digest_size=24).digest()
        return cls(*(int.from_bytes(digest[i : i + 8], "little") for i in (0, 8, 16)))


def check_id_field(path: Path, fields: Iterable[str], spec: Spec, where: str) -> None:
    """A person-level release's id field is among the input's fields (``where``: header or schema): exit 3 before
    anything is spent otherwise."""
    field = spec.id_column
    if field is not None and field not in set(fields):
        raise InputError(f"input {path}: the person id field {field} (privacy.unit.id) is missing from the {where}")


def missing_id(id_text: pl.Expr) -> pl.Expr:
    """A missing id: null, empty, or holding U+FFFD (the field was not valid UTF-8)."""
    return id_text.is_null() | (id_text == "") | id_text.str.contains("\ufffd", literal=True)


def _cut(frame: pl.DataFrame, used: list[str], k: int) -> pl.DataFrame:
    """Each person's first ``k`` rows in (h, used cells) order, sorted by (person, h, cells).

    Sorting by (hash of the id, h) is exact unless two persons share an id hash, or two different rows of one person
    share h: both are checked on the sorted rows (neighbours), and the rare chunk where either happens is sorted by
    the full order instead (id text, h, cells). Rows equal in every used cell are interchangeable."""
    s = frame.sort([_PID, _H])
    same = pl.col(_PID) == pl.col(_PID).shift()
    differ = pl.any_horizontal([pl.col(c).ne_missing(pl.col(c).shift()) for c in used]) if used else pl.lit(False)
    ambiguous = same & ((pl.col(ID_COLUMN) != pl.col(ID_COLUMN).shift()) | ((pl.col(_H) == pl.col(_H).shift()) & differ))
    if s.select(ambiguous.any()).item():
        s = frame.sort([_PID, ID_COLUMN, _H, *used], nulls_last=True)
    return s.filter(_place() < k)


def _new_person() -> pl.Expr:
    return ((pl.col(_PID) != pl.col(_PID).shift()) | (pl.col(ID_COLUMN) != pl.col(ID_COLUMN).shift())).fill_null(True)


def _place() -> pl.Expr:
    """A row's place among its person's rows, on rows sorted by person (no hashing: runs of the sorted rows)."""
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    return index - pl.when(_new_person()).then(index).forward_fill()


class PersonRows:
    """The rows of a person-level release, bounded as the rules say; see the module docstring."""

    # the kept rows are cut again to K per person once they pass twice their size after the last cut plus this
    COMPACT_ROWS = 1 << 20

    def __init__(self, plan: Plan, secret: bytes):
        unit = plan.spec.privacy.person
        if unit is None:
            raise ValueError("PersonRows needs a person-level plan (privacy.unit: {id: ...})")
        self.plan = plan
        self.unit: PersonUnit = unit
        self.used = used_columns(plan.spec)
        self.seeds = Seeds.of(secret)
        # an empty text cell reads as a null one (no key is empty): both are hashed as null, so that a CSV (where an
        # empty field is null, a quoted one empty) and a typed file keep the same rows
        typed = column_types(plan.spec, self.used)
        self.normal = [pl.when(pl.col(c) != "").then(pl.col(c)).alias(c) for c in self.used if typed[c] == pl.String()]
        self.statistics = [_StatisticRule(plan.spec, sp, unit, self.seeds) for sp in plan.statistics]
        self.parts: list[pl.DataFrame] = []
        self.held = 0  # rows in parts
        self.after_cut = 0  # rows in parts after the last cut
        self.singles: list[list[pl.DataFrame]] = [[] for _ in plan.statistics]  # totals of missing-id persons
        self._cells: list[pl.DataFrame] | None = None

    # -- adding rows -------------------------------------------------------------------------------------------------

    def add(self, rows: pl.DataFrame) -> None:
        """Typed rows of the used columns and the id text (``ID_COLUMN``)."""
        self.take(self.prepare(rows))

    def prepare(self, rows: pl.DataFrame) -> tuple[pl.DataFrame, list[pl.DataFrame] | None]:
        """What ``take`` needs of a chunk of rows; it changes nothing here (worker threads run it in parallel)."""
        rows = rows.select(ID_COLUMN, *self.used).with_columns(self.normal)
        missing = missing_id(pl.col(ID_COLUMN))
        singles = None
        if self.unit.missing_id == "person" and rows.height:
            alone = rows.filter(missing)
            if alone.height:
                singles = self._single_totals(alone)
        keyed = rows.lazy().filter(~missing).with_columns(
            pl.col(ID_COLUMN).hash(self.seeds.person).alias(_PID),
            pl.struct(ID_COLUMN, *self.used).hash(self.seeds.row).alias(_H),
        ).collect()
        return _cut(keyed, self.used, self.unit.max_rows), singles

    def take(self, prepared: tuple[pl.DataFrame, list[pl.DataFrame] | None]) -> None:
        kept, singles = prepared
        if self._cells is not None:
            raise RuntimeError("rows added after cell_frames()")
        if singles is not None:
            for i, frame in enumerate(singles):
                self.singles[i] = [compact([*self.singles[i], frame])]
        if kept.height:
            self.parts.append(kept)
            self.held += kept.height
        if self.held > 2 * self.after_cut + self.COMPACT_ROWS:
            self._cut_all()

    def remove_missing(self, rows: pl.DataFrame) -> None:
        """Take back rows with a missing id that were added (the engine's line reading made one row too many): under
        ``missing_id: drop`` they were left out anyway."""
        if not rows.select(missing_id(pl.col(ID_COLUMN)).all()).item():
            raise ValueError("only rows with a missing id can be taken back")
        if self.unit.missing_id == "person" and rows.height:
            for i, frame in enumerate(self._single_totals(rows.select(ID_COLUMN, *self.used))):
                negated = frame.with_columns(-pl.col(c) for c in frame.columns if c in ("n", "s"))
                self.singles[i] = [compact([*self.singles[i], negated])]

    @property
    def held_rows(self) -> int:
        """Rows held now (at most about twice the persons times K, plus COMPACT_ROWS and the last chunk's)."""
        return self.held

    def _cut_all(self) -> None:
        if len(self.parts) > 1 or self.held > self.after_cut:
            both = pl.concat(self.parts, how="vertical") if self.parts else self._empty()
            self.parts = [_cut(both, self.used, self.unit.max_rows)]
        self.held = self.after_cut = sum(p.height for p in self.parts)

    def _empty(self) -> pl.DataFrame:
        typed = column_types(self.plan.spec, self.used)
        return pl.DataFrame(schema={ID_COLUMN: pl.String(), **typed, _PID: pl.UInt64(), _H: pl.UInt64()})

    def _single_totals(self, rows: pl.DataFrame) -> list[pl.DataFrame]:
        """Totals of rows that are each a person of their own (every rule keeps such a row whole)."""
        frame = rows.lazy().with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).alias(_PERSON),
            pl.lit(0, dtype=pl.UInt64).alias(_PID),
            pl.lit(0, dtype=pl.Int64).alias(_RANK),
        )
        return pl.collect_all([rule.totals(frame) for rule in self.statistics])

    # -- results -----------------------------------------------------------------------------------------------------

    def kept_rows(self) -> pl.DataFrame:
        """The rows kept (at most K per person), with each row's person number and rank: the final cut."""
        self._cut_all()
        kept = self.parts[0] if self.parts else self._empty()
        return kept.select(
            _new_person().cum_sum().cast(pl.Int64).alias(_PERSON),
            pl.col(_PID),
            _place().alias(_RANK),
            *self.used,
        )

    def cell_frames(self) -> list[pl.DataFrame]:
        """Per statistic, in plan order, the per-cell totals of these rows (see the module docstring)."""
        if self._cells is None:
            kept = self.kept_rows().lazy()
            frames = pl.collect_all([rule.totals(kept) for rule in self.statistics])
            self._cells = [compact([frame, *singles]) for frame, singles in zip(frames, self.singles, strict=True)]
            self.parts = []
        return self._cells

    def finish(self) -> list[ExactStatistic]:
        return exact_from_frames(self.plan, [self.cell_frames()])


def exact_from_frames(plan: Plan, partials: Iterable[list[pl.DataFrame]]) -> list[ExactStatistic]:
    """The exact statistics from several ``PersonRows.cell_frames()`` whose persons are disjoint (Spark's
    partitions, each holding every row of its persons), added up."""
    per_statistic: list[list[pl.DataFrame]] = [[] for _ in plan.statistics]
    for frames in partials:
        for parts, frame in zip(per_statistic, frames, strict=True):
            parts.append(frame)
    return [cell_arrays(sp, compact(parts)) for sp, parts in zip(plan.statistics, per_statistic, strict=True)]


class _StatisticRule:
    """Rules 3 and 4 for one statistic, over kept rows numbered by person (``_PERSON``, ``_PID``, ``_RANK``)."""

    def __init__(self, spec: Spec, sp: StatisticPlan, unit: PersonUnit, seeds: Seeds):
        stat = sp.statistic
        q = Query()
        r = recipe(spec, sp, q, pl.Int128())
        code, key = r.cell(q.row_keys.__getitem__)
        self.columns = [code.alias("code")] + ([] if key is None else [key.alias("key")])
        self.cell = ["code"] + ([] if key is None else ["key"])
        self.value = None
        self.kind = stat.kind
        if stat.kind in ("sum", "mean"):
            column = spec.columns[stat.column]  # type: ignore[index]
            self.value = numeric_value(column).alias("#v")
            self.offset = sp.component("sum").offset
            self.bounds = column.grid_bounds
            self.per_person = stat.clamp == "person"  # type: ignore[union-attr]
        self.persons = stat.kind == "count" and stat.of == "persons"  # type: ignore[union-attr]
        has_cells = bool(stat.dimensions)
        self.groups = unit.max_groups if has_cells else None
        self.rows_per_group = unit.max_rows_per_group if has_cells else None
        self.seed = seeds.cell

    def totals(self, kept: pl.LazyFrame) -> pl.LazyFrame:
        cell = self.cell
        columns = [pl.col(_PERSON), pl.col(_PID), pl.col(_RANK), *self.columns]
        present = pl.all_horizontal(pl.col(c).is_not_null() for c in cell)
        if self.value is not None:
            columns.append(self.value)
            present = present & pl.col("#v").is_not_null()
        rows = kept.select(columns).filter(present)
        if self.groups is not None:
            cells = (
                rows.select(_PERSON, _PID, *cell)
                .unique()
                .with_columns(pl.struct(_PID, *cell).hash(self.seed).alias(_G))
                .sort([_PERSON, _G, *cell])
                .filter(pl.int_range(pl.len()).over(_PERSON) < self.groups)
            )
            rows = rows.join(cells.select(_PERSON, *cell), on=[_PERSON, *cell], how="semi")
        if self.rows_per_group is not None:
            rows = rows.filter(pl.col(_RANK).rank("ordinal").over([_PERSON, *cell]) <= self.rows_per_group)
        if self.value is None:
            n = pl.col(_PERSON).n_unique() if self.persons else pl.len()
            return rows.group_by(cell).agg(n.cast(pl.Int64).alias("n"))
        value = pl.col("#v").cast(pl.Int128)
        if self.per_person:
            lo, hi = self.bounds
            rows = rows.group_by([_PERSON, *cell]).agg(value.sum().clip(lo, hi).alias("#v"))
        return rows.group_by(cell).agg(
            pl.len().cast(pl.Int64).alias("n"), (value - self.offset).sum().cast(pl.Int128).alias("s")
        )
