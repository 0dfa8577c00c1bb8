"""The audit of a series (issue 26): ``dpcli audit SPEC`` on a spec with ``series:`` audits the series as its one
charge covers it, every piece at once.

- **The period field is a candidate column.** Candidate rows gain the series' period field (an input field, never a
  declared column): values in different periods, at a period's first and last instant, at the start and the end of
  the horizon, before the start and after period T, with an offset, naive (read as UTC), date only, missing,
  unparseable and calendar-invalid; for an index field 1, 2, T, 0, T + 1, missing and text. The base rows lie in
  period 1. Under ``replace`` two candidate rows that differ in their period field alone are a row moving between
  periods (and with another column too, a row moving between periods and cells).
- **Pieces, through the real engine.** The pieces audited are those the candidate rows can reach: per_period, the
  level-0 piece of every period a candidate's field puts it in (and the base's); running totals, every block of the
  tree (dpcli.plan.tree) holding one of those periods, at most h per period; ``method: factorization``, every product
  f<t> from the first period reached to T (a row in period s changes every product t >= s), each the run's own
  combination (dpcli.run.series_products.exact_products) of the periods' exact values. Each period or block is
  aggregated by the real engine with the real period assignment (the plan of its family with ``periods`` set to the
  piece's periods, as a period's run does). A piece no candidate row reaches has the same exact values under D and D'
  (the same noise law under both, which no test can use), so T = 8,760 costs what T = 8 does, times h for the tree
  (a factorisation's products, though, are combined in O(T²) per candidate dataset).
  Which periods a candidate's field names is read with the engine's own rule (dpcli.engine.periods.period_index);
  every candidate dataset is also aggregated over all the other periods together, where it must equal the base: a row
  the engine put in a period its field does not name is a bug (InternalError), never a silent gap in the search.
- **Targets over all pieces at once.** The audit plan lists, per family and level (per-period values; each level of
  the tree), the family's statistics with their cells laid out piece after piece: one noise component per family, so
  every piece is noised at its own plan's noise (a block at its per-block share). A statistic's target covers every
  piece of it; the series' target (``(series)``) covers every piece of every statistic against the series' one charge:
  the pure ε summed over the pieces, or ρ summed (a Laplace part in zCDP counting ε²/2 per family and level: the
  levels of the tree compose, the periods of one level in parallel).

- **Under a person unit** (per_period only, on a renewing cap) each period is a person-level release of its own rows,
  charged to its own period's cap: the audit is period 1's release (one piece, ``(period 1)``) at the per-period plan
  and its period filter (the engine keeps the period's rows before it bounds a person's), against one period's
  budget. Candidate persons hold rows in period 1 and elsewhere (dpcli.audit.neighbours adds persons with rows
  outside it); instead of the row unit's check over the other periods (which a person's rows there legitimately
  change), each candidate person's dataset must give period 1 the exact values of the same dataset with only the
  person's rows in period 1 (``within``, ``check_within``). A person present in k periods has k·ε over the series.

The tree is audited from the plan's block structure (``SeriesPlan.blocks`` and dpcli.plan.tree): a block's noisy state
is its statistics' exact values over the block's periods' rows plus the block plan's noise.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl

from dpcli.audit.targets import Target, without_interval_draws
from dpcli.core.accounting import zcdp_to_epsilon
from dpcli.engine import ExactStatistic, aggregate
from dpcli.engine.periods import period_index
from dpcli.errors import InternalError
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.series import SeriesPlan
from dpcli.plan.tree import Block
from dpcli.run.series_products import exact_products, product_name
from dpcli.specs.model import Series

__all__ = ["SeriesLayout", "base_period_text", "layout_of", "period_texts", "periods_of", "series_field"]

# The base rows' period: the middle of period 1 (or index 1)
BASE_PERIOD = 1
# Under a person unit, the period whose release is audited (the base rows' own)
AUDITED_PERIOD = BASE_PERIOD
_MICROSECOND = timedelta(microseconds=1)
# Offsets a candidate instant is written with (east and west of UTC, one not a whole hour)
_EAST = timezone(timedelta(hours=5, minutes=30))
_WEST = timezone(timedelta(hours=-8))



class Aggregate(Protocol):
    """The aggregation of one piece: the real engine's (dpcli.engine.aggregate), or a faulty one a test hands in.
    ``secret``: the person-level key of the rows' choice (None under unit: row)."""

    def __call__(self, plan: Plan, path: Path, *, secret: bytes | None = None) -> list[ExactStatistic]: ...


def series_field(series: Series) -> str:
    return series.period.column


def _utc(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def base_period_text(series: Series) -> str:
    """The base rows' period field: the middle of period 1 (index 1)."""
    rule = series.period
    if rule.indexed:
        return str(BASE_PERIOD)
    first, end = rule.bounds(BASE_PERIOD)
    return _utc(first + (end - first) / 2)


def period_texts(series: Series) -> list[str]:
    """The candidate period fields, periods 1 and 2 first (a capped product keeps those two)."""
    t_last = series.periods
    rule = series.period
    if rule.indexed:
        texts = ["1", str(min(2, t_last)), str(t_last), "0", str(t_last + 1), "", "n/a", " 1 "]
        return list(dict.fromkeys(texts))
    first, end = rule.bounds(1)
    second = rule.bounds(min(2, t_last))[0]
    middle_start, middle_end = rule.bounds(t_last // 2 + 1)
    last_end = rule.bounds(t_last)[1]
    texts = [
        _utc(first),  # period 1's first instant: the start of the horizon
        _utc(second),  # period 2's first instant
        _utc(end - _MICROSECOND),  # period 1's last instant
        _utc(last_end - _MICROSECOND),  # the end of the horizon: period T's last instant
        _utc(middle_start + (middle_end - middle_start) / 2),  # a period in the middle
        _utc(first - _MICROSECOND),  # before the start
        _utc(last_end),  # after period T
        second.astimezone(_EAST).isoformat(),  # with an offset (east): period 2's first instant
        (end - _MICROSECOND).astimezone(_WEST).isoformat(),  # with an offset (west): period 1's last instant
        second.astimezone(UTC).replace(tzinfo=None).isoformat(),  # naive (read as UTC)
        second.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" "),  # naive, a space for T
        (second + timedelta(days=1)).astimezone(UTC).date().isoformat(),  # a date alone (midnight UTC)
        "",  # missing
        "n/a",  # unparseable
        f"{first.astimezone(UTC).year}-02-30",  # a date the calendar lacks
    ]
    return list(dict.fromkeys(texts))


def periods_of(series: Series, texts: Sequence[str]) -> list[int | None]:
    """The period of each field text by the engine's own rule (None: no period)."""
    frame = pl.DataFrame({"text": [str(t) for t in texts]}, schema={"text": pl.String()})
    out: list[int | None] = frame.select(period_index(series, pl.col("text"))).to_series().to_list()
    return out


@dataclass(frozen=True)
class Piece:
    """One piece of the series: the periods whose rows it reads, and its name in the report."""

    periods: frozenset[int]
    label: str
    product: int | None = None  # the factorisation's product t (its value: sum_{s <= t} C[t - s] x_s), else None


@dataclass(frozen=True)
class Group:
    """A family's pieces that compose in parallel (per-period values; one level of the tree), at one plan's noise."""

    plan: Plan
    pieces: tuple[Piece, ...]
    name: str


def _claimed_epsilon(sp: StatisticPlan) -> Fraction:
    """A Laplace or exponential statistic's pure ε, as dpcli.audit.targets claims it."""
    return sp.reported_epsilon if sp.reported_epsilon is not None else sp.epsilon


def _with_pieces(sp: StatisticPlan, pieces: int) -> StatisticPlan:
    return dataclasses.replace(sp, cells=sp.cells * pieces)


def _concatenate(parts: Sequence[ExactStatistic]) -> ExactStatistic:
    def join(vectors: list[np.ndarray | None]) -> np.ndarray | None:
        if any(v is None for v in vectors):
            return None
        return np.concatenate([v for v in vectors if v is not None])

    counts = join([p.counts for p in parts])
    if counts is None:
        raise InternalError("a piece without counts")
    return ExactStatistic(counts, join([p.sums for p in parts]), None, join([p.squares for p in parts]))


def _same(a: Sequence[ExactStatistic], b: Sequence[ExactStatistic]) -> bool:
    def equal(x: np.ndarray | None, y: np.ndarray | None) -> bool:
        return (x is None) == (y is None) and (x is None or y is None or x.tolist() == y.tolist())

    return all(equal(p.counts, q.counts) and equal(p.sums, q.sums) and equal(p.squares, q.squares)
               for p, q in zip(a, b, strict=True))


class SeriesLayout:
    """A series laid out for the audit: its pieces (per family and level), the audit plan whose statistics hold every
    piece's cells one after another, and the aggregation of a candidate dataset piece by piece by the real engine.

    ``per_period`` and ``blocks`` are the families' plans as audited (interval draws left out)."""

    def __init__(self, splan: SeriesPlan, per_period: Plan | None, blocks: Plan | None, aggregate: Aggregate) -> None:
        spec = splan.spec
        series = splan.series
        # a person unit (per_period only: dpcli.specs.rules refuses its running totals): one period's release
        self.person = spec.privacy.person is not None
        if self.person and (blocks is not None or per_period is None):
            raise InternalError("a series under a person unit has per-period values only")
        self.splan, self.series, self.spec = splan, series, spec
        self.field = series_field(series)
        self.per_period, self.blocks = per_period, blocks
        self._aggregate = aggregate
        texts = [base_period_text(series), *period_texts(series)]
        reached = sorted({t for t in periods_of(series, texts) if t is not None})
        groups: list[Group] = []
        if per_period is not None and self.person:
            groups.append(Group(per_period, (Piece(frozenset({AUDITED_PERIOD}), f"period {AUDITED_PERIOD}"),),
                                "one period's values"))
        elif per_period is not None:
            groups.append(Group(per_period, tuple(Piece(frozenset({t}), f"period {t}") for t in reached),
                                "per-period values"))
        if blocks is not None and splan.factorized:
            # a row in period s changes every product t >= s (by C[t - s] times its change): all from the first reached
            groups.append(Group(blocks, tuple(
                Piece(frozenset(range(1, t + 1)), f"product {product_name(t)}", t)
                for t in range(reached[0], series.periods + 1)
            ), "running totals, factorisation products"))
        elif blocks is not None:
            for level in range(splan.levels):
                chosen = sorted({Block(level, (t - 1) >> level) for t in reached})
                pieces = tuple(
                    Piece(frozenset(range(b.first, b.last + 1)),
                          f"block {b.key} (period {b.first})" if b.level == 0 else
                          f"block {b.key} (periods {b.first}-{b.last})")
                    for b in chosen if b.last <= series.periods
                )
                if pieces:
                    groups.append(Group(blocks, pieces, f"running totals, level {level}"))
        self.groups = tuple(groups)
        self.size = len(spec.statistics)
        main = per_period if per_period is not None else blocks
        if main is None:
            raise InternalError("a series plans per-period values, a tree, or both")
        self.plan = dataclasses.replace(main, statistics=tuple(
            _with_pieces(sp, len(g.pieces)) for g in self.groups for sp in g.plan.statistics
        ), periods=None)
        self._base: list[list[ExactStatistic]] | None = None  # per piece in group order: the base's exact values
        self._base_path: Path | None = None
        self._others: dict[frozenset[int], list[ExactStatistic]] = {}
        self._reached = frozenset(reached)
        self._base_periods: dict[int, list[ExactStatistic]] = {}  # the base's exact values per reached period
        self._empty: list[ExactStatistic] | None = None  # a period no candidate reaches (no base row in it either)
        self._lock = threading.Lock()

    # -- the layout

    def piece_of(self, i: int, cell: int) -> tuple[str, int]:
        """The piece (its label) and the family's cell of the audit plan's statistic ``i``'s cell ``cell``."""
        group = self.groups[i // self.size]
        per_piece = self.plan.statistics[i].cells // len(group.pieces)
        k, inner = divmod(cell, per_piece)
        return group.pieces[k].label, inner

    def family(self, i: int) -> StatisticPlan:
        """The family's plan of the audit plan's statistic ``i`` (its cells one piece's)."""
        return self.groups[i // self.size].plan.statistics[i % self.size]

    # -- the real engine, piece by piece

    def _pieces(self) -> list[tuple[Plan, Piece]]:
        return [(g.plan, p) for g in self.groups for p in g.pieces]

    def _run(self, plan: Plan, path: Path, secret: bytes | None) -> list[ExactStatistic]:
        return self._aggregate(plan, path) if secret is None else self._aggregate(plan, path, secret=secret)

    def aggregate(self, path: Path, texts: Sequence[str] | None, secret: bytes | None = None) -> list[ExactStatistic]:
        """A candidate dataset's exact values, piece after piece (the audit plan's statistics). ``texts``: the
        candidate's period fields (None: the base dataset, read first). Only the pieces holding a period a
        candidate's field names are aggregated (the others are the base's); the dataset over every other period
        together must be the base's. Under a person unit (``secret``: the audit's fixed key of the rows' choice) the
        audited period alone, whatever periods the candidate's rows name: its rows elsewhere are checked by
        ``check_within``."""
        if self.person:
            if secret is None:
                raise InternalError("a person-unit series aggregated without the audit's secret")
            plan, piece = self._pieces()[0]
            return self._run(dataclasses.replace(plan, periods=piece.periods), path, secret)
        pieces = self._pieces()
        if texts is None:
            products = self._products(path, None)
            self._base = [products[product_name(p.product)] if p.product is not None else
                          self._run(dataclasses.replace(plan, periods=p.periods), path, secret) for plan, p in pieces]
            self._base_path = path
            per_piece = self._base
        else:
            if self._base is None:
                raise InternalError("a candidate aggregated before the base")
            named = frozenset(t for t in periods_of(self.series, [str(x) for x in texts]) if t is not None)
            products = self._products(path, named)
            per_piece = [
                products[product_name(p.product)] if p.product is not None else
                self._run(dataclasses.replace(plan, periods=p.periods), path, secret) if p.periods & named else base
                for (plan, p), base in zip(pieces, self._base, strict=True)
            ]
            self._check_others(path, named, texts)
        out = []
        k = 0
        for g in self.groups:
            rows = per_piece[k:k + len(g.pieces)]
            k += len(g.pieces)
            out += [_concatenate([row[j] for row in rows]) for j in range(self.size)]
        return out

    def within(self, texts: Sequence[str]) -> list[bool]:
        """Under a person unit: which of a candidate person's rows (their period fields) the audited period holds,
        by the engine's own rule."""
        return [t == AUDITED_PERIOD for t in periods_of(self.series, [str(x) for x in texts])]

    def check_within(self, whole: list[ExactStatistic], own: list[ExactStatistic], texts: Sequence[str]) -> None:
        """Under a person unit: the audited period's exact values with a candidate person's every row (``whole``)
        must be those with only the person's rows in that period (``own``): a person's rows in other periods (or in
        none) never change a period's release, neither by being counted there nor by taking the place of the
        period's own rows when the person's rows are bounded (a filter after the bounding, or none)."""
        if not _same(whole, own):
            shown = ", ".join(repr(str(t))[:60] for t in list(dict.fromkeys(texts))[:3])
            raise InternalError(
                f"a person's rows in other periods (period fields {shown}) change period {AUDITED_PERIOD}'s exact "
                "values: the engine must keep only the period's rows before it bounds a person's rows "
                "(dpcli.engine.persons.PersonRows.periods)"
            )

    def _products(self, path: Path, named: frozenset[int] | None) -> dict[str, list[ExactStatistic]]:
        """The factorisation's products of a dataset by the run's own code (exact_products), from each period's
        exact values by the real engine: a period a candidate's field names from the candidate, any other from the
        base (equal to the candidate's there: _check_others). ``named`` None: the base, each reached period
        aggregated once; a period no text reaches holds no base row, so its values are the engine's over all of them
        together (checked to be empty)."""
        wanted = [p.product for g in self.groups for p in g.pieces if p.product is not None]
        if not wanted or self.blocks is None:
            return {}
        period_plan = self.blocks
        if named is None:
            self._base_periods = {s: self._aggregate(dataclasses.replace(period_plan, periods=frozenset({s})), path)
                                  for s in sorted(self._reached)}
            rest = frozenset(range(1, self.series.periods + 1)) - self._reached
            if rest:
                empty = self._aggregate(dataclasses.replace(period_plan, periods=rest), path)
                if any(np.any(np.asarray(v) != 0) for e in empty for v in (e.counts, e.sums) if v is not None):
                    raise InternalError("the audit's base dataset has a row in a period no candidate reaches")
                self._empty = empty
            named = frozenset()

        def period_values(s: int) -> list[ExactStatistic]:
            if s in named:
                return self._aggregate(dataclasses.replace(period_plan, periods=frozenset({s})), path)
            if s in self._base_periods:
                return self._base_periods[s]
            if self._empty is None:
                raise InternalError(f"period {s}'s values asked of the audit before the base's")
            return self._empty

        return exact_products(wanted, self.series.periods, period_values)

    def _check_others(self, path: Path, named: frozenset[int], texts: Sequence[str]) -> None:
        others = frozenset(range(1, self.series.periods + 1)) - named
        if not others:
            return
        plan = dataclasses.replace(self.groups[0].plan, periods=others)
        with self._lock:
            base = self._others.get(named)
        if base is None:
            if self._base_path is None:
                raise InternalError("a candidate aggregated before the base")
            base = self._aggregate(plan, self._base_path)
            with self._lock:
                self._others[named] = base
        if not _same(self._aggregate(plan, path), base):
            shown = ", ".join(repr(str(t))[:60] for t in texts[:3])
            raise InternalError(
                f"the engine counts a row (period field {shown}) in a period its field does not put it in "
                "(dpcli.engine.periods.period_index)"
            )

    # -- targets

    def targets(self, delta: Fraction) -> list[Target]:
        """Per statistic (and per part of a mean) over every piece, then the series against its one charge."""
        spec = self.spec
        families: list[tuple[Plan, int]] = []  # (audited family plan, how many times the charge counts it)
        if self.per_period is not None:
            families.append((self.per_period, 1))
        if self.blocks is not None:
            families.append((self.blocks, self.splan.multiplicity))  # h blocks, or |c_1|^2 shares (products)
        out: list[Target] = []
        every: list[tuple[int, str]] = []
        for j, stat in enumerate(spec.statistics):
            columns = tuple(dict.fromkeys((*stat.by, *([stat.column] if stat.column else []), self.field)))
            indices = [g * self.size + j for g in range(len(self.groups))]
            first = self.plan.statistics[indices[0]]
            roles = tuple((i, c.role) for i in indices for c in self.plan.statistics[i].components)
            every += roles
            mechanism = first.mechanism
            if mechanism == "discrete_gaussian":
                rho = sum((w * plan.statistics[j].rho for plan, w in families), Fraction(0))
                claim = (zcdp_to_epsilon(rho, delta), delta, rho, "ρ")
            else:
                eps = sum((w * _claimed_epsilon(plan.statistics[j]) for plan, w in families), Fraction(0))
                claim = (eps, Fraction(0), eps, "ε")
            scope = f"period {AUDITED_PERIOD}" if self.person else "series"
            out.append(Target(stat.name, "statistic", f"{stat.kind} ({scope})", mechanism, roles, *claim, columns))
            if len(first.components) > 1:
                for comp in first.components:
                    parts = tuple((i, comp.role) for i in indices)
                    if comp.mechanism == "discrete_gaussian":
                        rho = sum((w * plan.statistics[j].component(comp.role).rho for plan, w in families),
                                  Fraction(0))
                        claim = (zcdp_to_epsilon(rho, delta), delta, rho, "ρ")
                    else:
                        eps = sum((w * plan.statistics[j].component(comp.role).epsilon for plan, w in families),
                                  Fraction(0))
                        claim = (eps, Fraction(0), eps, "ε")
                    out.append(Target(f"{stat.name}/{comp.role}", "component",
                                      f"{stat.kind} ({comp.role} part, {scope})", comp.mechanism, parts, *claim,
                                      columns))
        mechanisms = {sp.mechanism for sp in self.plan.statistics}
        mechanism = mechanisms.pop() if len(mechanisms) == 1 else "mixed"
        columns = tuple(dict.fromkeys(c for t in out if t.scope == "statistic" for c in t.columns))
        kind = f"{self.size} statistics, {self.series.periods} periods, design {self.series.design}"
        label = "(series)"
        if self.person:  # one period's release against one period's cap (the series' per-period budget)
            label = f"(period {AUDITED_PERIOD})"
            kind = f"{self.size} statistics, period {AUDITED_PERIOD} of {self.series.periods}, its own period's cap"
        if spec.privacy.accounting == "pure":
            eps = sum((w * plan.epsilon for plan, w in families), Fraction(0))
            out.append(Target(label, "release", kind, mechanism, tuple(every), eps, Fraction(0), eps, "ε",
                              columns))
        else:
            rho = sum((w * plan.rho for plan, w in families), Fraction(0))
            out.append(Target(label, "release", kind, mechanism, tuple(every), zcdp_to_epsilon(rho, delta),
                              delta, rho, "ρ", columns))
        return out

    def describe(self) -> str:
        if self.person:
            return (f"under a person unit each period is a person-level release of that period's rows, charged to "
                    f"its own period's cap: period {AUDITED_PERIOD}'s release is audited against one period's budget, "
                    "the candidate persons' rows in that period and in others (other periods, before the start, "
                    "after period T, missing, unparseable), each candidate dataset through the real engine at the "
                    f"per-period plan; and period {AUDITED_PERIOD}'s exact values with a person's every row must be "
                    "those with only the person's rows in it. The series as a whole protects a person present in "
                    "k periods at k times the per-period budget (k·ε: the renewing cap)")
        shown = "; ".join(f"{g.name}: {', '.join(p.label for p in g.pieces)}" for g in self.groups)
        return f"the pieces candidate rows reach, each aggregated by the real engine: {shown}"


def layout_of(splan: SeriesPlan, engine: Aggregate = aggregate) -> tuple[SeriesLayout, list[str]]:
    """The audit's layout of a series plan (its families' quantile interval draws left out, as a release's are:
    dpcli.audit.targets.without_interval_draws), and the statistics whose draws were left out. ``engine``: the
    aggregation of one piece (the real engine's; a test may hand a faulty one to show the audit catches it)."""
    skipped: list[str] = []
    families: list[Plan | None] = []
    for plan in (splan.per_period, splan.blocks):
        if plan is None:
            families.append(None)
            continue
        kept, left_out = without_interval_draws(plan)
        families.append(kept)
        skipped += [name for name in left_out if name not in skipped]
    return SeriesLayout(splan, families[0], families[1], engine), skipped
