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

How it is done, and where that is finer than the rules above:
- A person is told by the id's own text: two rows are one person's exactly when their ids are equal, never because
  two hashes agree. A merge of two persons is not harmless: with a person added, the merged pair keeps K rows of
  both, so the other person's K kept rows can be swapped for K of the newcomer's and 2K rows move (twice the
  sensitivity the plan charges). A keyed hash would make a merge rare, not impossible, and polars' seeded hash is no
  PRF: for text it is XXH3 with a 64-bit seed, for which a pair of ids colliding with probability about 2^-27 under
  a random seed can be written down without knowing the seed (Cyan4973/xxHash#1127). Holding and comparing the
  text instead of a second 64-bit hash costs about a tenth: 10M rows, 1M persons, K=4, in one run (best of 3, on
  the shared 2-core machine at load 7-8; ``bench/bench_person_ids.py``): 8.02 s against 7.13 s (1.12x), 7.23
  against 6.64 CPU seconds (1.09x), peak RSS 1186 against 1159 MiB (1.02x).
- A row is held as what the statistics read of it (its cell codes, open keys and grid values, one column per
  distinct expression), with the id's text and its keyed hash, h, and a 64-bit sort key (the id hash's upper 40
  bits, then h's upper 24: see ``_cut``, which orders the rare rows where that key is not enough the exact way).
  Rows tying on h are ordered by those columns, not by their text: rows that differ only in what no statistic reads
  are interchangeable. Either way the order depends on the row alone, never on the file's order.
- Memory is bounded by the persons, not the rows: each chunk is sorted on the key as it arrives (in the polars
  engine's worker threads), and the rows held are cut to K per person whenever they have grown past ``GROWTH`` (4)
  times their size after the last cut (plus ``COMPACT_ROWS``); rows with a missing id that are persons of their
  own are counted at once and never held.

The keyed hashes (of the id, ordering the rows; of a row, h; of a person's cell) are polars' seeded ``hash`` (its
seeds drawn from the 32-byte secret by keyed BLAKE2b; polars 2.1 takes one 64-bit seed per hash), the same in every
process of one polars version. Measured on 500,000 rows (an id and three used cells, one run on the shared 2-core
machine): 0.024 s for polars' hash of the rows, 1.19 s for a keyed ``hashlib.blake2b`` of each row in Python, ~50x
slower, which would be most of a release's time. The privacy guarantee does not rest on the hashes' strength: who
is whom is decided by the ids' text, and h and the cell hash only order one person's own rows (any rule that looks
only at the person's own rows bounds their contribution); the secret keeps the choice from being predictable from
the data. A collision of the id hash across persons only sends their rows down ``_cut``'s exact path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dpcli.core.suggest import did_you_mean
from dpcli.engine.cells import (
    ExactStatistic,
    Query,
    cell_arrays,
    column_types,
    compact,
    numeric_value,
    recipe,
    squared,
    used_columns,
)
from dpcli.engine.periods import period_rows
from dpcli.errors import InputError
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.squares import square_step
from dpcli.specs.grid import quantile_bins
from dpcli.specs.model import Count, Mean, PersonUnit, Quantile, Spec, Sum, Variance

ID_COLUMN = "#id"  # the id field's text among the typed rows (a declared column's name cannot start with #)
SECRET_BYTES = 32
_PID = "#pid"  # keyed hash of the id
_IDTEXT = "#idtext"  # the id's own text among the rows held: with _PID, the person (see _cut); never a hash alone
_H = "#h"  # h, the keyed hash of the row: its place among the person's rows
_KEY = "#key"  # the upper 40 bits of _PID, then the upper _ROW_BITS of h: what the rows are sorted on (see _cut)
_ROW_BITS = 24
_PREFIX_MASK = ((1 << 64) - 1) ^ ((1 << _ROW_BITS) - 1)
_PERSON = "#person"  # the person's number among the rows kept (after the final cut)
_RANK = "#rank"  # the row's place among its person's kept rows: (h, cells) order
_G = "#g"  # keyed hash of (person, cell): the cell's place among the person's cells
_GROUP = "#group"  # a quantile's cell of by: (its code over the candidate bins), what G and R bound


@dataclass(frozen=True)
class Seeds:
    """The keyed hashes' seeds, drawn from the release's secret (polars' hash takes one 64-bit seed): of the id (the
    rows' order), of a row (h) and of a person's cell."""

    person: int
    row: int
    cell: int

    @classmethod
    def of(cls, secret: bytes) -> Seeds:
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"the person-level secret is {SECRET_BYTES} bytes")
        digest = hashlib.blake2b(b"dpcli person-level seeds", key=secret, digest_size=32).digest()
        # bytes 8..15 seeded a second hash of the id, which told persons apart before the id's text did
        return cls(*(int.from_bytes(digest[i : i + 8], "little") for i in (0, 16, 24)))


def check_id_field(path: Path, fields: Iterable[str], spec: Spec, where: str) -> None:
    """A person-level release's id field is among the input's fields (``where``: header or schema): exit 3 before
    anything is spent otherwise."""
    field = spec.id_column
    names = list(fields)
    if field is not None and field not in names:
        hint = did_you_mean(field, [name for name in names if name not in spec.columns])  # the file's schema
        raise InputError(f"input {path}: the person id field {field} (privacy.unit.id) is missing from the {where}"
                         + (f" ({hint})" if hint else ""))


def hash_probe() -> tuple[int, ...]:
    """polars' seeded hash of a few fixed rows of each typed kind (text, integer, float, missing), as ``PersonRows``
    hashes ids and rows: equal on two machines when their hashes agree. The version check alone would miss a
    hash that depends on the processor (e.g. an executor on another architecture)."""
    frame = pl.DataFrame(
        {"t": ["dpcli", "", None, "\u00e9"], "i": [1, -(2**62), None, 0], "f": [0.5, float("nan"), None, -0.0]}
    )
    hashed = frame.select(pl.col("t").hash(7).alias("t"), pl.struct("t", "i", "f").hash(11).alias("row"))
    return (*hashed["t"].to_list(), *hashed["row"].to_list())


def missing_id(id_text: pl.Expr) -> pl.Expr:
    """A missing id: null, empty, or holding U+FFFD (the field was not valid UTF-8)."""
    return id_text.is_null() | (id_text == "") | id_text.str.contains("\ufffd", literal=True)


def swap_rows(rows: pl.DataFrame, added: Sequence[pl.DataFrame], taken: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """``rows`` less the rows of ``taken`` (as multisets: each takes away one identical row of ``rows``, all of which
    must be there), plus the rows of ``added``. How the polars engine swaps what its quote-blind read made of the
    lines holding quotes for their quoted reading: identical rows are interchangeable."""
    if not taken:
        return pl.concat([rows, *added], how="vertical") if added else rows
    gone = pl.concat(taken, how="vertical")
    columns = rows.columns
    counts = gone.group_by(columns).agg(pl.len().alias("#m"))
    indexed = rows.with_row_index("#i")
    hits = indexed.join(counts, on=columns, how="inner", nulls_equal=True)
    drop = hits.filter(pl.int_range(pl.len()).over(columns) < pl.col("#m"))["#i"]
    if drop.len() != gone.height:
        raise ValueError("rows taken away that were not there")
    return pl.concat([indexed.filter(~pl.col("#i").is_in(drop.implode())).drop("#i"), *added], how="vertical")


def _cut(frame: pl.DataFrame, cells: list[str], k: int, *, numbered: bool = False) -> pl.DataFrame:
    """Each person's first ``k`` rows in (h, cells) order; ``numbered``: with each row's person number
    (``_PERSON``) and place among its person's rows (``_RANK``).

    The rows are ordered by ``_KEY`` (the id's hash's upper 40 bits, then h's upper 24 bits): a 64-bit key sorts
    about twice as fast as the 128-bit (id hash, h) it replaced (4M rows on the shared 2-core machine: 0.48 s
    against 1.0 s), and only the key and the id's text are moved to find the rows kept; the kept rows alone
    are then gathered. So ordered, every person's rows form a run in h order, except where two persons share the
    key's 40 bits of the id's hash, or two rows tie on the key. Both show on neighbouring rows (a person is the id's
    text: two persons whose id hashes agree in all 64 bits still differ there); only the rows under such a 40-bit
    prefix are then ordered the exact way, by (key, the id's hash and text, h, cells), and each row's place counted
    per person (a window over the id's text), so that a tie or a shared prefix never lets one person's rows change
    another's choice. Rows equal in every held column are interchangeable."""
    order = frame.select(pl.col(_KEY).arg_sort()).to_series().alias("#i")
    s = frame.select(_KEY, _IDTEXT)[order]
    same = _prefix() == _prefix().shift()
    ambiguous = same & ((pl.col(_KEY) == pl.col(_KEY).shift()) | _other_person())
    shared = s.filter(ambiguous).select(_prefix()).to_series().implode()
    runs = s.select(order, _place().alias(_RANK), _new_person().alias(_PERSON))
    if shared.list.len().item():
        runs = runs.filter(~s.select(_prefix().is_in(shared)).to_series())
    runs = runs.filter(pl.col(_RANK) < k)
    kept = frame[runs["#i"]]
    if numbered:
        kept = kept.with_columns(runs[_RANK], runs[_PERSON].cum_sum().cast(pl.Int64))
    if not shared.list.len().item():
        return kept
    exact = frame.filter(_prefix().is_in(shared)).sort([_KEY, _PID, _IDTEXT, _H, *cells], nulls_last=True)
    place = pl.int_range(pl.len(), dtype=pl.Int64).over(_PID, _IDTEXT)
    exact = exact.with_columns(place.alias(_RANK)).filter(pl.col(_RANK) < k)
    if not numbered:
        return pl.concat([kept, exact.drop(_RANK)], how="vertical")
    person = pl.struct(_PID, _IDTEXT).rank("dense").cast(pl.Int64) + kept.height + 1
    return pl.concat([kept, exact.with_columns(person.alias(_PERSON))], how="vertical")


def _own_text(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` with their ids' text copied out of the buffers it was gathered from. A gather of polars strings
    shares its source's buffers, so the few rows a cut keeps of each part would keep every long id of that part
    alive, and memory would grow with the file rather than the persons (20 gathers of 1,000 rows from 40 MB of
    40-character ids each held 946 MB; copied, 186 MB)."""
    return rows.with_columns(pl.concat_str(pl.col(_IDTEXT), pl.lit("")).alias(_IDTEXT))


def _other_person() -> pl.Expr:
    """A row of another person than the row before: another id text (equal texts have equal hashes)."""
    return pl.col(_IDTEXT) != pl.col(_IDTEXT).shift()


def _prefix() -> pl.Expr:
    """The key's upper 40 bits: of the id's first hash."""
    return pl.col(_KEY) // (1 << _ROW_BITS)


def _new_person() -> pl.Expr:
    return _other_person().fill_null(True)


def _place() -> pl.Expr:
    """A row's place among its person's rows, on rows sorted by person (no hashing: runs of the sorted rows)."""
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    return index - pl.when(_new_person()).then(index).forward_fill()


class PersonRows:
    """The rows of a person-level release, bounded as the rules say; see the module docstring."""

    # the rows held are cut to K per person once they pass GROWTH times their size after the last cut plus
    # COMPACT_ROWS (each chunk is sorted as it arrives). 4 rather than 2: fewer cuts at the same peak (10M rows, 1M
    # persons, K=4, best of 2, twice each: 5.71 s and 1.18 GB with 2, 4.88-5.13 s and 1.15 GB with 4; 8 was faster
    # still but held more)
    COMPACT_ROWS = 1 << 20
    GROWTH = 4

    def __init__(self, plan: Plan, secret: bytes):
        unit = plan.spec.privacy.person
        if unit is None:
            raise ValueError("PersonRows needs a person-level plan (privacy.unit: {id: ...})")
        self.plan = plan
        self.unit: PersonUnit = unit
        self.used = used_columns(plan.spec)
        # a series: only the rows of this run's periods, kept BEFORE a person's rows are bounded, so the K rows kept
        # in a period never depend on that person's rows in other periods (None: not a series)
        self.periods = period_rows(plan)
        self.seeds = Seeds.of(secret)
        # an empty text cell reads as a null one (no key is empty): both are hashed as null, so that a CSV (where an
        # empty field is null, a quoted one empty) and a typed file keep the same rows
        typed = column_types(plan.spec.columns, self.used)
        self.normal = [pl.when(pl.col(c) != "").then(pl.col(c)).alias(c) for c in self.used if typed[c] == pl.String()]
        # what the statistics read of a row (cell codes, open keys, values), computed once per chunk: the rows are
        # held as these, not as their text
        self.cells: dict[str, pl.Expr] = {}
        self.statistics = [_StatisticRule(plan.spec, sp, unit, self.seeds, self.cells) for sp in plan.statistics]
        self.schema = pl.DataFrame(schema={ID_COLUMN: pl.String(), **typed}).lazy().select(
            pl.lit(0, dtype=pl.UInt64).alias(_KEY),
            pl.lit(0, dtype=pl.UInt64).alias(_PID),
            pl.lit("", dtype=pl.String).alias(_IDTEXT),
            pl.lit(0, dtype=pl.UInt64).alias(_H),
            *(e.alias(n) for n, e in self.cells.items()),
        ).collect().clear()
        self.parts: list[pl.DataFrame] = []
        self.held = 0  # rows in parts
        self.after_cut = 0  # rows in parts after the last cut
        self.singles: list[list[pl.DataFrame]] = [[] for _ in plan.statistics]  # totals of missing-id persons
        self._cells: list[pl.DataFrame] | None = None

    # -- adding rows -------------------------------------------------------------------------------------------------

    def add(self, rows: pl.DataFrame) -> None:
        """Typed rows of the used columns and the id text (``ID_COLUMN``)."""
        self.take(self.prepare(rows))

    def prepare(
        self,
        rows: pl.DataFrame | pl.LazyFrame,
        added: Sequence[pl.DataFrame | pl.LazyFrame] = (),
        taken: Sequence[pl.DataFrame | pl.LazyFrame] = (),
    ) -> tuple[pl.DataFrame, list[pl.DataFrame] | None]:
        """What ``take`` needs of a chunk of rows (with the rows ``added``, less the rows ``taken``: multisets); it
        changes nothing here (worker threads run it in parallel). The polars engine hands the chunk's reads as lazy
        frames, so that the id's text is hashed as it is parsed, never held."""
        frames = (rows, *added, *taken)
        reads = [self._normal(frame) for frame in frames]
        queries = [self._keyed(read) for read in reads]
        alone = self.unit.missing_id == "person"
        if alone:
            cells = [e.alias(n) for n, e in self.cells.items()]
            for read in reads:
                # the row numbers are selected with the cells, not added after them: with no cell read (a release
                # of counts alone) a select of the cells alone would keep no row, and count nothing
                frame = read.filter(missing_id(pl.col(ID_COLUMN))).select(
                    pl.int_range(pl.len(), dtype=pl.Int64).alias(_PERSON),
                    pl.lit(0, dtype=pl.UInt64).alias(_PID),
                    pl.lit(0, dtype=pl.Int64).alias(_RANK),
                    *cells,
                )
                queries += [rule.totals(frame) for rule in self.statistics]
        results = pl.collect_all(queries)
        n, plus = len(reads), 1 + len(added)
        keyed = swap_rows(results[0], results[1:plus], results[plus:n])
        singles = None
        if alone:
            m = len(self.statistics)
            totals = [results[n + j * m : n + (j + 1) * m] for j in range(n)]
            for j in range(plus, n):
                totals[j] = [
                    f.with_columns(pl.col(c) * -1 for c in f.columns if c in ("n", "s", "s2")) for f in totals[j]
                ]
            singles = [compact([t[i] for t in totals]) for i in range(m)]
        # sorted, not cut: a chunk holds ~0.4 rows of each of a million persons, so its own cut removes almost nothing
        # and cost more than it saved (10M rows, 1M persons, K=4: 5.1 s with a cut per chunk, 3.9 s with a sort
        # alone, 6.2 s with neither); sorted parts make the held rows' cuts faster, and this runs in the workers
        return keyed.sort(_KEY), singles

    def _normal(self, rows: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
        frame = rows.lazy() if self.periods is None else rows.lazy().filter(self.periods)
        return frame.select(ID_COLUMN, *self.used).with_columns(self.normal)

    def _keyed(self, read: pl.LazyFrame) -> pl.LazyFrame:
        """The rows of ``read`` (normalised) with an id: the id's hash and text, h, the sort key and the cells held."""
        pid = pl.col(ID_COLUMN).hash(self.seeds.person)
        h = pl.struct(ID_COLUMN, *self.used).hash(self.seeds.row)
        return read.filter(~missing_id(pl.col(ID_COLUMN))).select(
            pid.alias(_PID),
            pl.col(ID_COLUMN).alias(_IDTEXT),
            h.alias(_H),
            *(e.alias(n) for n, e in self.cells.items()),
        ).with_columns(((pl.col(_PID) & _PREFIX_MASK) | (pl.col(_H) // (1 << (64 - _ROW_BITS)))).alias(_KEY))

    def keyed(self, rows: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
        """What ``prepare`` computes of a chunk's rows before its sort, unsorted and uncut: the per-row work of a
        person-level release, which ``bench/bench_person_floor.py`` measures on its own."""
        return self._keyed(self._normal(rows))

    def take(self, prepared: tuple[pl.DataFrame, list[pl.DataFrame] | None]) -> None:
        kept, singles = prepared
        if self._cells is not None:
            raise RuntimeError("rows added after cell_frames()")
        if singles is not None:
            for i, frame in enumerate(singles):
                if frame.height:
                    self.singles[i] = [compact([*self.singles[i], frame])]
        if kept.height:
            self.parts.append(kept)
            self.held += kept.height
        if self.held > self.GROWTH * self.after_cut + self.COMPACT_ROWS:
            self._cut_all()

    def remove_missing(self, rows: pl.DataFrame) -> None:
        """Take back rows with a missing id that were added (the engine's line reading made one row too many): under
        ``missing_id: drop`` they were left out anyway."""
        if not rows.select(missing_id(pl.col(ID_COLUMN)).all()).item():
            raise ValueError("only rows with a missing id can be taken back")
        self.take(self.prepare(rows.clear(), (), [rows]))

    @property
    def held_rows(self) -> int:
        """Rows held now (at most GROWTH times the persons times K, plus COMPACT_ROWS)."""
        return self.held

    def _cut_all(self) -> None:
        if len(self.parts) > 1 or self.held > self.after_cut:
            # not rechunked: _cut gathers the rows kept from the parts (8 sorted parts of 700k rows: 0.47-0.55 s CPU
            # against 0.64-0.71 s rechunked; not told apart in a whole release at load 15-23)
            both = pl.concat(self.parts, how="vertical", rechunk=False) if self.parts else self.schema
            self.parts = [_own_text(_cut(both, list(self.cells), self.unit.max_rows))]
        self.held = self.after_cut = sum(p.height for p in self.parts)

    # -- results -----------------------------------------------------------------------------------------------------

    def kept_rows(self) -> pl.DataFrame:
        """The rows kept (at most K per person), as the statistics read them, with each row's person number and
        rank: the final cut."""
        held = pl.concat(self.parts, how="vertical", rechunk=False) if self.parts else self.schema
        kept = _cut(held, list(self.cells), self.unit.max_rows, numbered=True)
        return kept.select(_PERSON, _PID, _RANK, *self.cells)

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


def _named(cells: dict[str, pl.Expr], expr: pl.Expr) -> str:
    """The name of the held column computing ``expr`` (one column per distinct expression)."""
    for name, known in cells.items():
        if known.meta.eq(expr):
            return name
    name = f"#c{len(cells)}"
    cells[name] = expr
    return name


class _StatisticRule:
    """Rules 3 and 4 for one statistic, over kept rows numbered by person (``_PERSON``, ``_PID``, ``_RANK``) holding
    the columns this statistic reads (registered in ``cells``)."""

    def __init__(self, spec: Spec, sp: StatisticPlan, unit: PersonUnit, seeds: Seeds, cells: dict[str, pl.Expr]):
        stat = sp.statistic
        q = Query()
        r = recipe(spec, sp, q, pl.Int128())
        code, key = r.cell(q.row_keys.__getitem__)
        has_cells = bool(stat.dimensions)
        # a quantile's code is (cell of by:) x (candidate bin): held with or without by:, its by: cell (the code over
        # the bins) is what G and R bound, never the bins (a value is no cell of the person's)
        binned = isinstance(stat, Quantile)
        bins = quantile_bins(stat, spec.columns[stat.column]) if isinstance(stat, Quantile) else 1
        # (name in the totals, column held): a statistic without cells has the one cell 0
        # codes held as Int32 where they fit (fewer bytes to move in each sort), Int64 in the totals
        narrow = code.cast(pl.Int32) if sp.cells < 2**31 else code
        held = pl.col(_named(cells, narrow)).cast(pl.Int64) if has_cells or binned else pl.lit(0, dtype=pl.Int64)
        self.columns = [held.alias("code")]
        if key is not None:
            self.columns.append(pl.col(_named(cells, key)).alias("key"))
        self.cell = ["code"] + ([] if key is None else ["key"])
        self.bounded = self.cell  # the cells G and R bound
        if binned:
            self.columns.append((held // bins).alias(_GROUP))
            self.bounded = [_GROUP]
        self.value = None
        self.square_step: int | None = None  # variance and std: the centred squares' grid (rows clamped)
        if isinstance(stat, Sum | Mean | Variance):
            column = spec.columns[stat.column]
            self.value = pl.col(_named(cells, numeric_value(column))).alias("#v")
            self.offset = sp.component("sum").offset
            self.bounds = column.grid_bounds
            self.per_person = isinstance(stat, Sum | Mean) and stat.clamp == "person"
            if isinstance(stat, Variance):
                self.square_step = square_step(column)
        self.persons = isinstance(stat, Count) and stat.of == "persons"
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
        bounded = self.bounded
        if self.groups is not None:
            cells = (
                rows.select(_PERSON, _PID, *bounded)
                .unique()
                .with_columns(pl.struct(_PID, *bounded).hash(self.seed).alias(_G))
                .sort([_PERSON, _G, *bounded])
                .filter(pl.int_range(pl.len()).over(_PERSON) < self.groups)
            )
            rows = rows.join(cells.select(_PERSON, *bounded), on=[_PERSON, *bounded], how="semi")
        if self.rows_per_group is not None:
            rows = rows.filter(pl.col(_RANK).rank("ordinal").over([_PERSON, *bounded]) <= self.rows_per_group)
        if self.value is None:
            n = pl.col(_PERSON).n_unique() if self.persons else pl.len()
            return rows.group_by(cell).agg(n.cast(pl.Int64).alias("n"))
        value = pl.col("#v").cast(pl.Int128)
        if self.per_person:
            lo, hi = self.bounds
            rows = rows.group_by([_PERSON, *cell]).agg(value.sum().clip(lo, hi).alias("#v"))
        totals = [pl.len().cast(pl.Int64).alias("n"), (value - self.offset).sum().cast(pl.Int128).alias("s")]
        if self.square_step is not None:  # as engine.cells.squared: each kept row's rounded centred square
            totals.append(squared(pl.col("#v"), self.offset, self.square_step, pl.Int128()).alias("s2"))
        return rows.group_by(cell).agg(totals)
