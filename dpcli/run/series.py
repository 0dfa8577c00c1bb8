"""A series' period (issue 26): ``release_period(spec, period=N)`` releases period N of a spec with ``series:``.

    spec -> the period (--period, or a date-like release id) -> refusals (exit 2: no series, T + 1, unfinished,
         a person unit, Spark, a design not served) -> prepare (the series' charge key, the ledger) -> a frozen
         table of that period: written again, nothing read or spent
         -> [the input, when a piece the period needs is not drawn yet: its rows of that period only]
         -> no charge yet: PaidRun.pay (the series' whole budget, once) -> draw_pieces -> the period's table
            a charge:     PaidRun.draw_pieces (nothing spent) -> the period's table

A period's piece (``p<t>``) is the noisy state of every statistic from that period's rows, at the per-period budget,
drawn once, under the ledger's lock, stored and recorded before anything is made from it. The period's table is
made from its piece (its own values) and, when every earlier period's piece is recorded, from theirs too (the running
total to date of the linear statistics, with an interval from a rigorous tail bound of the summed noise), then
frozen: stored with a ``released`` record naming its pieces. A re-run returns the frozen table; a published figure
is never revised (no vintages).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpcli.core.accounting import format_exact
from dpcli.engine import ExactStatistic
from dpcli.engine.inputs import DEFAULT_INPUT_TIMEOUT, DEFAULT_MAX_INPUT_BYTES
from dpcli.errors import InternalError, UsageError
from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, Delivery, Ledger, Purchase, Record
from dpcli.ledger.base import period_key, recorded_pieces
from dpcli.mechanisms.noise import draw_noise
from dpcli.mechanisms.noisy import Noisy, decode_noisy, encode_noisy
from dpcli.plan.factorization import BITS as FACTORIZATION_BITS
from dpcli.plan.factorization import weights as product_estimate_weights
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.series import SeriesPlan, check_series_runnable, make_series_plan
from dpcli.plan.tree import Block as TreeBlock
from dpcli.plan.tree import blocks_within, exact_noise_variance, tree_weights
from dpcli.postprocess.factorization import estimate_products
from dpcli.postprocess.series import estimate_tree, linear_halfwidth, monotone_to_date, sum_periods
from dpcli.postprocess.values import MEAN_DIGITS_BELOW_PRECISION
from dpcli.publish.columns import Ints, LazyColumn, Texts
from dpcli.publish.sidecar import release_metadata
from dpcli.publish.store import decode_table, encode_table
from dpcli.publish.table import Block, Table, build_table
from dpcli.run.paid import Paid, PaidRun, Unpaid
from dpcli.run.prepare import prepare
from dpcli.run.release import Pages, Release, write_outputs
from dpcli.run.series_input import SeriesInput, added, needed_periods, period_files
from dpcli.run.series_products import exact_products, product_name, product_period
from dpcli.specs.kinds import KINDS, Value
from dpcli.specs.load import load_spec
from dpcli.specs.meaning import canonical, release_meaning
from dpcli.specs.model import Series, Spec
from dpcli.specs.v1 import PERIOD_COLUMN, SPAN_COLUMN

__all__ = [
    "SERIES_RELEASE_ID", "PeriodError", "charge_period", "choose_period", "expected_errors", "release_period",
    "series_plan_doc",
]

# The release id of a series' charge: one per dataset and spec name (dpcli.ledger.base.rerun_key), so a second
# series on one dataset needs its own `name:` (and is its own charge)
SERIES_RELEASE_ID = "series"
_DATE_ID = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[T_](\d{2})(?::?(\d{2}))?)?")


def choose_period(series: Series, period: int | None, release_id: str | None) -> int:
    """The period a run releases: ``--period N``, or the period whose span holds the instant a date-like release id
    names (``2027-01-05``, ``2027-01-05T06``, ``2027-01-05T06:30``: UTC). Both given and disagreeing, neither
    given, or an id that names no period: UsageError (exit 2)."""
    from_id = None
    if release_id is not None:
        match = _DATE_ID.fullmatch(release_id)
        if match is not None and not series.period.indexed:
            day, hour, minute = match.group(1), match.group(2) or "00", match.group(3) or "00"
            try:
                instant = datetime.fromisoformat(f"{day}T{hour}:{minute}:00+00:00")
            except ValueError:
                instant = None
            if instant is not None and series.period.every is not None:
                from_id = (instant - series.period.start_time()) // timedelta(seconds=series.period.every) + 1
        if from_id is None and period is None:
            raise UsageError(
                f"release id '{release_id[:60]}' names no period of this series (a date like 2027-01-05 does, for a "
                "series with a start)", hint="give --period N"
            )
    if period is not None and from_id is not None and period != from_id:
        raise UsageError(f"--period {period} and release id '{release_id}' (period {from_id}) disagree",
                         hint="give one of them")
    chosen = period if period is not None else from_id
    if chosen is None:
        raise UsageError("a spec with a series releases one period per run", hint="give --period N (1..T)")
    return int(chosen)


def check_period(series: Series, t: int, allow_unfinished: bool, now: datetime | None = None) -> None:
    """Period t is one of the series' and has ended (by the clock, which is public): UsageError (exit 2) otherwise,
    before anything is read or spent."""
    if t < 1:
        raise UsageError(f"period {t} is not a period of this series: its periods are 1..{series.periods}")
    if t > series.periods:
        raise UsageError(
            f"period {t} is past the series' horizon of {series.periods} periods: this series is complete",
            hint="start the next series with a new spec `name:` (and, for dates, a new `start:`): it is a new charge",
        )
    if allow_unfinished or series.period.indexed:
        return
    _start, end = series.period.bounds(t)
    if (now or datetime.now(UTC)) < end:
        raise UsageError(
            f"period {t} has not ended (it ends at {end.isoformat()}): rows may still arrive",
            hint="wait for its end, or pass --allow-unfinished (rows arriving later never count in it)",
        )


@dataclass(frozen=True)
class PeriodError:
    """A linear statistic's expected error at period t (the spec's confidence, in its units): its own value's and
    its running total's."""

    statistic: str
    period: int
    value: float
    to_date: float


def expected_errors(splan: SeriesPlan, t: int) -> list[PeriodError]:
    """The half-widths at period t of each linear statistic's first noise part (a count's, a sum's, a mean's sum),
    at the spec's confidence, in its units: its own value and its running total over 1..t. per_period: the period's
    noise and the sum of t of them; the tree: Honaker's estimates over the blocks inside [1, t]
    (dpcli.postprocess.series); both: the period's own value from its per-period release, the total from the tree.
    Every one a rigorous tail bound of the exact noise (dpcli.postprocess.series.linear_halfwidth)."""
    confidence = float(splan.main.confidence)
    out = []
    for i, sp in enumerate(splan.main.statistics):
        if not KINDS[sp.statistic.kind].linear or KINDS[sp.statistic.kind].value is Value.MEAN:
            continue  # a mean's error needs its rows (dpcli plan --expected-rows gives the period's)
        comp = sp.components[0]
        unit = float(comp.unit)
        if splan.blocks is None:
            value = comp.halfwidth(confidence) * unit
            total = linear_halfwidth(np.ones(t), comp.mechanism, _parameter(sp, 0), confidence) * unit
        else:
            block = splan.blocks.statistics[i]
            if splan.factorized:
                period_weights, to_date_weights = product_estimate_weights(splan.series.periods, t)
            else:
                _blocks, period_weights, to_date_weights = tree_weights(t)
            mechanism, parameter = block.components[0].mechanism, _parameter(block, 0)
            total = linear_halfwidth(to_date_weights, mechanism, parameter, confidence) * unit
            value = (comp.halfwidth(confidence) * unit if splan.per_period is not None
                     else linear_halfwidth(period_weights, mechanism, parameter, confidence) * unit)
        out.append(PeriodError(sp.statistic.name, t, value, total))
    return out


def series_plan_doc(splan: SeriesPlan, at: list[int]) -> dict[str, Any]:
    """``dpcli plan``'s series section: the charge, horizon, design, derivation, errors at chosen periods, and which
    periods' rows each run reads (when periods come in order)."""
    series, spec = splan.series, splan.spec
    shown = sorted({t for t in at if 1 <= t <= series.periods})
    reads = sorted({*range(1, min(series.periods, 8) + 1), series.periods})
    return {
        "periods": series.periods,
        "design": series.design,
        "period_rule": {"column": series.period.column, "start": series.period.start,
                        "every_seconds": series.period.every},
        "method": series.method if series.running else None,
        "levels": splan.levels if splan.blocks is not None and not splan.factorized else None,
        # the factorisation's lattice C = round(2^bits L) and its largest column's squared norm (the sensitivity)
        "lattice": ({"bits": FACTORIZATION_BITS, "column_norm_squared": splan.multiplicity} if splan.factorized
                    else None),
        "charge": {"epsilon": format_exact(splan.charge.epsilon), "rho": format_exact(splan.charge.rho)},
        # once for the series; per_period: to each period's own cap (a renewing cap, which a person unit needs;
        # `dpcli plan --ledger` says so of any series on a renewing-cap dataset)
        "charged": "per_period" if splan.spec.privacy.person is not None else "once",
        "derivation": splan.derivation(),
        "errors": [{"statistic": e.statistic, "period": e.period, "value": e.value, "to_date": e.to_date}
                   for t in shown for e in expected_errors(splan, t)],
        "reads": {str(t): splan.reads(t) for t in reads},
        # an input template: the files those runs open (dpcli.run.series_input); else the one input has every row
        "files": None if spec.input_template is None else {
            str(t): [str(path) for _, path in period_files(spec, splan.reads(t))] for t in reads},
    }


def _parameter(sp: StatisticPlan, index: int) -> Fraction:
    comp = sp.components[index]
    return comp.required_variance() if comp.mechanism == "discrete_gaussian" else comp.required_scale()


def release_period(
    spec: Spec | str | Path,
    *,
    period: int | None = None,
    release_id: str | None = None,
    allow_unfinished: bool = False,
    input: str | Path | None = None,  # noqa: A002 - the contract's name
    output: str | Path | None = None,
    ledger: str | Path | Ledger | None = None,
    fmt: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    input_timeout: float | None = DEFAULT_INPUT_TIMEOUT,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    progress: Callable[[str], None] | None = None,
    input_format: str | None = None,
    engine: str | None = None,
    on_input_bytes: Callable[[int, int | None], None] | None = None,
    sidecar: str | Path | None = None,
    now: datetime | None = None,
    report: str | Path | None = None,
    summary_md: str | Path | None = None,
) -> Release:
    """Release period ``period`` (or the one a date-like ``release_id`` names) of a spec with ``series:``; the other
    arguments are ``release``'s. The first period released (whichever it is) makes the series' one charge; later
    ones spend nothing. A period already released returns its frozen table, reading no input. ``report`` and
    ``summary_md``: the period's HTML report and Markdown summary, as a release's (dpcli.run.release.Pages: checked
    before anything is read, the summary opened before the spend, both written after the table)."""
    say = progress or (lambda _msg: None)
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    if spec.series is None:
        raise UsageError("this spec has no series: --period is for a spec with `series:`")
    series = spec.series
    t = choose_period(series, period, release_id)
    check_period(series, t, allow_unfinished=True)  # its place in the horizon; whether it has ended: below
    check_series_runnable(spec, engine)
    splan = make_series_plan(spec)
    charged_to = charge_period(series, t)
    ready = prepare(
        spec, input=input, output=output, ledger=ledger, fmt=fmt, release_id=SERIES_RELEASE_ID,
        lock_timeout=lock_timeout, input_timeout=input_timeout, input_format=input_format, engine=engine,
        sidecar=sidecar, say=say, period=charged_to, report=report, summary_md=summary_md,
    )
    book, run = ready.book, ready.run
    if run.cost != splan.charge:  # the spec's budget, split between the designs' parts: they add up to it exactly
        raise InternalError("a series' charge differs from its spec's budget")
    series_key = run.key
    plan = dataclasses.replace(splan.main, periods=frozenset({t}))
    work = _PeriodWork(plan, splan, book, run, t, period_key(series_key, t), series_key, ready.output, ready.fmt,
                       ready.meta, say, Pages(ready.report, ready.summary, book=book))
    charge = ready.paid
    # A renewing cap (issue 26): each period is charged to its own period's cap. The series' charge paid for the
    # period it was made in; any other period has its own spend (release id ``series:period-N``), made once.
    period_paid: Record | None = None
    status = book.status(spec.dataset, ready.records)
    if status is not None and status.per_period:
        p = run.purchase
        work.charged_to = charged_to
        work.period_run = PaidRun(
            book, spec.dataset, run.cost,
            Purchase.of(spec.dataset, p.spec_sha256, f"{SERIES_RELEASE_ID}:period-{t}", p.unit, p.neighbours,
                        p.statistics, meaning=release_meaning(spec), name=spec.name, period=charged_to),
            True, lock_timeout, say,
        )
    period_run = work.period_run if charge is not None and charge.get("period") != charged_to else None
    if period_run is not None:
        period_paid = period_run.earlier_spend(ready.records)
        work.run = period_run
    if charge is not None:
        frozen = book.frozen_period(work.key, ready.records)
        if frozen is not None:
            say(f"period {t} of this series is released: returning its frozen table, reading no input")
            work.pages.open()
            return work.rewrite(period_paid or charge, frozen[1])
    check_period(series, t, allow_unfinished, now)  # a period not released yet: has it ended?
    if period_run is not None and period_paid is None:
        period_run.check_budget(ready.records)  # this period's cap, before the input is read (exit 4)
        say(f"budget available in period '{charged_to}'")
    known = recorded_pieces(ready.records, series_key) if charge is not None else {}
    missing = [p for p in work.wanted if p not in known]
    if missing:
        plans = {name: work.piece_plan(name) for name in missing}
        # the one input, or the template's file of every period the pieces need (dpcli.run.series_input)
        with SeriesInput(ready, input, needed_periods(plans.values()), max_input_bytes, on_input_bytes, say) as rows:
            running = [p for p in missing if not p.startswith("p")]  # the tree's blocks, the factorisation's products
            if running:
                # one read of each file, its rows grouped by period: each needed period's exact aggregates (memory:
                # the needed periods times the cells), then each block the sum of its periods', each product their
                # integer combination (linear kinds only: counts and fixed-point sums add exactly)
                if splan.blocks is None:
                    raise InternalError("a series' running totals need their plan")
                by_period = rows.aggregate_periods(dataclasses.replace(
                    splan.blocks, periods=frozenset(needed_periods(plans[p] for p in running))))
                products = [t for t in map(product_period, running) if t is not None]
                work.exact.update(exact_products(products, series.periods, by_period.__getitem__))
                work.exact.update(block_sums([_block(p) for p in running if product_period(p) is None], by_period))
            for name in (p for p in missing if p.startswith("p")):  # a period's own piece: from its rows
                work.exact[name] = rows.aggregate(plans[name])
            say(f"exact aggregates of the rows of {len(missing)} piece(s) computed")
    work.pages.open()  # an existing summary file opened before the spend: refused there, nothing is spent
    if charge is None:
        return run.pay(work)
    if period_run is not None:
        return period_run.pay(work) if period_paid is None else period_run.draw_pieces(period_paid, work)
    return run.draw_pieces(charge, work)


def block_sums(
    blocks: list[TreeBlock], by_period: Mapping[int, list[ExactStatistic]],
) -> dict[str, list[ExactStatistic]]:
    """Each tree block's exact aggregates: the sum of its periods' (``by_period`` holds every period of every
    block), as differences of running sums over the periods given (exact integers: a block's periods are all there,
    so the periods between its ends that are given are exactly its own)."""
    if not blocks:
        return {}
    order = sorted(by_period)
    to_date: list[list[ExactStatistic]] = []  # to_date[k]: the sum over order[:k + 1]
    for t in order:
        to_date.append(by_period[t] if not to_date else [added(a, b) for a, b in zip(to_date[-1], by_period[t],
                                                                                      strict=True)])
    out = {}
    for block in blocks:
        last = bisect.bisect_right(order, block.last) - 1
        before = bisect.bisect_left(order, block.first) - 1
        if last < 0 or order[last] != block.last or before + 1 >= len(order) or order[before + 1] != block.first:
            raise InternalError(f"block {block.key}'s periods were not aggregated")
        out[block.key] = to_date[last] if before < 0 else [_less(a, b) for a, b in zip(to_date[last], to_date[before],
                                                                                      strict=True)]
    return out


def _less(a: ExactStatistic, b: ExactStatistic) -> ExactStatistic:
    """The exact aggregates of the rows of ``a``'s that are not ``b``'s (``b``'s rows among ``a``'s)."""
    return ExactStatistic(a.counts - b.counts, None if a.sums is None or b.sums is None else a.sums - b.sums,
                          squares=None if a.squares is None or b.squares is None else a.squares - b.squares)


def charge_period(series: Series, t: int) -> str:
    """The declared period a renewing cap charges period t of a series to (its key; dpcli.ledger.base.PERIOD_KEY):
    one rule, from the period alone, so that however a run names the period (``--period``, a date-like release id)
    it is charged to one key. A series with a start: the period's first instant in UTC, as a date (``2027-01-05``)
    when periods are whole days starting at midnight UTC (the key a plain release of that day's snapshot takes as
    its release id, so the two share the day's cap), else to the minute (``2027-01-05T06:00Z``); an index series:
    ``period-N``. Under a lifetime cap the key is not used."""
    rule = series.period
    if rule.indexed or rule.every is None:
        return f"period-{t}"
    first = rule.bounds(t)[0].astimezone(UTC)
    if rule.every % 86400 == 0 and (first.hour, first.minute, first.second) == (0, 0, 0):
        return first.strftime("%Y-%m-%d")
    return first.strftime("%Y-%m-%dT%H:%M" + (":%S" if first.second else "") + "Z")


@dataclass
class _PeriodWork:
    """One period's part of the paid run: the series' charge (``pay``'s Work: its stored state is the series'
    manifest, public facts only), then its pieces and its frozen table (``draw_pieces``' PieceWork)."""

    plan: Plan  # the per-period plan, restricted to this period's rows
    splan: SeriesPlan
    book: Ledger
    run: PaidRun
    period: int
    key: str  # the period's frozen table's name
    series_key: str
    output_path: Path | None
    fmt: str
    meta_path: Path | None
    say: Callable[[str], None]
    pages: Pages
    exact: dict[str, list[ExactStatistic]] = field(default_factory=dict)  # the pieces not drawn yet: their rows
    drawn: dict[str, bytes] = field(default_factory=dict)
    charged: bool = False  # this run made the series' charge
    waiting_for: str = "its charge"
    stored_note: str = "series charged"
    # a renewing cap: the period's key, and the run of this period's own spend (when the series' charge paid for
    # another period)
    charged_to: str | None = None
    period_run: PaidRun | None = None

    @property
    def wanted(self) -> list[str]:
        """The pieces this period's table is made from: its own per-period piece (``p<t>``), and every block of
        the tree inside [1, t] (``b<level>.<index>``)."""
        series = self.splan.series
        own = [f"p{self.period}"] if series.per_period else []
        if self.splan.factorized:  # the factorisation's products of periods 1..t
            return own + [product_name(s) for s in range(1, self.period + 1)]
        return own + ([b.key for b in blocks_within(self.period)] if series.running else [])

    def piece_plan(self, name: str) -> Plan:
        """The plan a piece is drawn with: the per-period plan over its period's rows, or the block plan over the
        rows of the block's periods."""
        if name.startswith("p"):
            if self.splan.per_period is None:
                raise InternalError(f"piece {name} of a series without per-period values")
            return dataclasses.replace(self.splan.per_period, periods=frozenset({int(name[1:])}))
        product = product_period(name)
        if product is not None and self.splan.blocks is not None:  # noise only: its exact values are combined
            return dataclasses.replace(self.splan.blocks, periods=frozenset(range(1, product + 1)))
        block = _block(name)
        if self.splan.blocks is None:
            raise InternalError(f"piece {name} of a series without a tree")
        return dataclasses.replace(self.splan.blocks, periods=frozenset(range(block.first, block.last + 1)))

    # -- the charge (PaidRun.pay's Work) -------------------------------------------------------------------------

    def draw(self) -> bytes:
        """The charge's stored state: the series' manifest (its horizon, design and period rule); no noise."""
        series = self.splan.series
        return json.dumps({"series": canonical(series), "charge": {"epsilon": format_exact(self.splan.charge.epsilon),
                                                                   "rho": format_exact(self.splan.charge.rho)}},
                          sort_keys=True, separators=(",", ":")).encode()

    def delivery(self, release_id: str, stored_sha256: str) -> Delivery:
        return Delivery(release_id, stored_sha256)

    def publish(self, spend: Record, paid: Paid) -> Release:
        self.charged = True
        return self.run.draw_pieces(spend, self)

    def republish(self, spend: Record, stored: bytes) -> Release:
        """A concurrent run charged the series first: this period goes on from its charge; under a renewing cap,
        from its own period's spend when that charge paid for another period."""
        if self.period_run is not None and spend.get("period") != self.charged_to:
            self.run = self.period_run
            own = self.period_run.earlier_spend(self.book.records())
            return self.period_run.pay(self) if own is None else self.period_run.draw_pieces(own, self)
        return self.run.draw_pieces(spend, self)

    def unstored(self, released: bool) -> str:
        return "its manifest was never stored" if not released else "its stored manifest is missing"

    def drop(self) -> None:
        """Kept: a run that lost the charge's race still draws its own period's piece."""

    # -- the period (PaidRun.draw_pieces' PieceWork) -------------------------------------------------------------

    def draw_pieces(self, charge: Record, hold_from_here: Callable[[], None]) -> None:
        self.drawn = self.book.draw_pieces(
            self.plan.spec.dataset, self.series_key, charge.seq, self.wanted, self._draw, before_draw=hold_from_here
        )
        self.exact = {}
        if self.drawn:
            self.say(f"piece(s) {', '.join(self.drawn)[:200]} drawn, stored and recorded")

    def _draw(self, missing: list[str]) -> Mapping[str, bytes]:
        out = {}
        for name in missing:
            exact = self.exact.get(name)
            if exact is None:  # a piece recorded when the run began is never missing later: records only grow
                raise InternalError(f"piece {name} is drawn from the exact aggregates of its rows")
            out[name] = encode_noisy(draw_noise(self.piece_plan(name), exact))
        return out

    def finish(self, charge: Record, paid: Paid) -> Release:
        monotone = self.splan.series.monotone
        while True:  # once, unless a monotone total's bounds changed (another period frozen) before it was frozen
            records = self.book.records()
            table, used = self._table(records)
            before = frozen_periods(records, self.series_key, self.splan.series.periods)
            if monotone:
                table = self._monotone(table, records, before)
            data = encode_table(table)
            delivery = Delivery(f"{SERIES_RELEASE_ID}:period-{self.period}", hashlib.sha256(data).hexdigest(),
                                period=self.period, pieces=tuple(used))
            current = self._unchanged(before) if monotone else _always
            done = self.book.freeze_period_if(self.key, data, delivery, current)
            if done is not None:
                break
            self.say("another period was frozen meanwhile: its running total bounds this one's, made again")
        paid.stored = True
        self.say(f"period {self.period}'s table frozen")
        return self._write(charge, decode_table(done[1]), paid)

    def _unchanged(self, before: frozenset[int]) -> Callable[[list[Record]], bool]:
        """Under the lock: the periods frozen are still ``before`` (a monotone total's bounds have not moved)."""
        return lambda records: frozen_periods(records, self.series_key, self.splan.series.periods) == before

    def _table(self, records: list[Record]) -> tuple[Table, list[str]]:
        """Period t's table from the stored pieces, and the pieces it used."""
        known = recorded_pieces(records, self.series_key)

        def piece(name: str) -> list[Noisy]:
            data = self.drawn.get(name)
            return decode_noisy(data if data is not None else self.book.load_piece(self.series_key, name, known=known))

        t = self.period
        series = self.splan.series
        if series.running:
            own = piece(f"p{t}") if series.per_period else None
            blocks: Pieces = ([piece(product_name(s)) for s in range(1, t + 1)] if self.splan.factorized
                              else {b: piece(b.key) for b in blocks_within(t)})
            return tree_table(self.splan, t, blocks, own), self.wanted
        earlier = range(1, t)
        to_date = [piece(f"p{s}") for s in earlier] if all(f"p{s}" in known for s in earlier) else None
        used = [f"p{s}" for s in range(1, t + 1)] if to_date is not None else [f"p{t}"]
        return period_table(self.plan, t, piece(f"p{t}"), to_date), used

    def _monotone(self, table: Table, records: list[Record], frozen: frozenset[int]) -> Table:
        """``series.monotone``: each count's running total to date made non-decreasing online
        (dpcli.postprocess.series.monotone_to_date): at least the nearest earlier period's published total, at most
        the nearest later one's (the published totals are non-decreasing already, so these are the largest earlier
        and the smallest later), read from their frozen tables, which are public. Published figures are never
        revised; each interval is the one from before the projection, widened just enough to hold the value."""
        cache: dict[int, Table] = {}

        def published(s: int, statistic: str) -> np.ndarray | None:
            if s not in cache:
                frozen_table = self.book.frozen_period(period_key(self.series_key, s), records)
                if frozen_table is None:
                    raise InternalError(f"period {s} of a series is recorded frozen and has no table")
                cache[s] = decode_table(frozen_table[1])
            block = _to_date_of(cache[s], statistic)
            return None if block is None else _integers(block.value)

        t = self.period
        earlier = sorted((s for s in frozen if s < t), reverse=True)
        later = sorted(s for s in frozen if s > t)
        blocks = []
        for block in table.blocks:
            if _span(block) != "to_date" or KINDS[block.kind or "count"].value is not Value.COUNT:
                blocks.append(block)
                continue
            floor = next((v for v in (published(s, block.statistic) for s in earlier) if v is not None), None)
            ceiling = next((v for v in (published(s, block.statistic) for s in later) if v is not None), None)
            values = _integers(block.value)
            projected = monotone_to_date(values, 0.0, floor, ceiling).value
            value = np.rint(projected).astype(np.int64)
            low = np.minimum(_integers(block.ci_low), value)
            high = np.maximum(_integers(block.ci_high), value)
            blocks.append(dataclasses.replace(block, value=Ints(value), ci_low=Ints(low), ci_high=Ints(high)))
        return dataclasses.replace(table, blocks=tuple(blocks))

    def rewrite(self, charge: Record, frozen: bytes) -> Release:
        return self._write(charge, decode_table(frozen), Unpaid(
            f"nothing was spent (period {self.period} was released; the series was paid by record {charge.seq})"),
            reused=True)

    def _write(self, charge: Record, table: Table, paid: Paid | Unpaid, reused: bool = False) -> Release:
        charged = self.charged
        done = released_period(self.book.records(), self.key)
        meta = {**release_metadata(self.plan, charge, charge.hash, table.contract),
                # the series' whole charge (the plan above is one draw's: a period's, or a tree block's)
                "epsilon": format_exact(self.splan.charge.epsilon), "rho": format_exact(self.splan.charge.rho),
                "series": series_metadata(self.splan, self.period, charge, done)}
        if reused:
            meta["reissued"] = True
        out_sha = write_outputs(table, self.output_path, self.fmt, meta, paid, self.meta_path)
        self.say("output written")
        status = self.book.status(self.plan.spec.dataset, period=charge.get("period"))  # a renewing cap: the period's
        result = Release(self.plan, table, charge, status, self.output_path, out_sha, self.book.name,
                         f"{SERIES_RELEASE_ID}:period-{self.period}", meta, reused=reused, period=self.period,
                         charged=charged and not reused)
        return self.pages.write(result, paid.text())  # --report, --summary-md: after the table, as a release's


def _always(_records: list[Record]) -> bool:
    return True


def frozen_periods(records: list[Record], series_key: str, periods: int) -> frozenset[int]:
    """The periods of the series ``series_key`` whose tables are frozen."""
    return frozenset(
        int(r.get("series_period")) for r in records
        if r.type == "released" and type(r.get("series_period")) is int and 1 <= int(r.get("series_period")) <= periods
        and r.get("release_key") == period_key(series_key, int(r.get("series_period")))
    )


def _to_date_of(table: Table, statistic: str) -> Block | None:
    """A statistic's running-total block in a period's table (None: that table has none)."""
    return next((b for b in table.blocks if b.statistic == statistic and _span(b) == "to_date"), None)


def _span(block: Block) -> str | None:
    """A period table's block: its ``span`` (``period`` or ``to_date``; None: an empty block)."""
    return block.labels[SPAN_COLUMN][0] if len(block) else None


def _integers(column: LazyColumn) -> np.ndarray:
    """A column of whole numbers (a count's published values) as integers."""
    return np.asarray([int(x) for x in column], dtype=np.int64)


def released_period(records: list[Record], key: str) -> Record | None:
    return next((r for r in records if r.type == "released" and r.get("release_key") == key), None)


def series_metadata(splan: SeriesPlan, t: int, charge: Record, done: Record | None) -> dict[str, Any]:
    """The sidecar's series facts: horizon, design, period rule, the charge's record, this period and its pieces."""
    series = splan.series
    rule = series.period
    return {
        "periods": series.periods,
        "design": series.design,
        **({"method": series.method} if series.running else {}),
        "period": t,
        "period_rule": {"column": rule.column, "start": rule.start, "every_seconds": rule.every},
        "charge": {"record": charge.seq, "epsilon": str(charge.get("epsilon")), "rho": charge.get("rho", "0")},
        "pieces": [] if done is None else list(done.get("pieces") or []),
        "frozen_record": None if done is None else done.seq,
        "unit_note": _unit_note(splan, charge),

    }


def _unit_note(splan: SeriesPlan, charge: Record) -> str | None:
    """What the series protects, in words (the sidecar's ``series.unit_note``)."""
    notes = []
    if splan.spec.privacy.person is None:
        notes.append("unit row: the series protects one row; a person with k rows spends k times the budget")
    if charge.get("period") is not None:
        notes.append(f"each period is charged to its own period's cap (this one: '{charge.get('period')}'): a person "
                     "present in k periods has k times the budget (k·ε)")
    return "; ".join(notes) or None


# ---------------------------------------------------------------------------------------------------------------
# The period's table: its own values and, for the linear statistics, the running total to date


def period_table(plan: Plan, t: int, own: list[Noisy], earlier: list[list[Noisy]] | None) -> Table:
    """Period t's table: every statistic's values from the period's noisy state (the release's table, its
    post-processing included), each row labelled ``period`` t and ``span`` ``period``; then, when every earlier
    period's state is given, each linear statistic's running total over 1..t (``span`` ``to_date``): the sum of the
    periods' noisy integers, its interval the rigorous half-width of a sum of t noises at the plan's confidence."""
    base = build_table(plan, own)
    blocks = [_labelled(b, t, "period") for b in base.blocks]
    if earlier is not None:
        states = [*earlier, own]
        for sp, block, i in zip(plan.statistics, base.blocks, range(len(plan.statistics)), strict=True):
            if not KINDS[sp.statistic.kind].linear:
                continue
            parts = [s[i] for s in states]
            blocks.append(_labelled(_to_date_block(plan, sp, block, parts), t, "to_date"))
    return dataclasses.replace(base, dimensions=(PERIOD_COLUMN, SPAN_COLUMN, *base.dimensions), blocks=tuple(blocks))


def _labelled(block: Block, t: int, span: str) -> Block:
    n = len(block)
    return dataclasses.replace(block, labels={PERIOD_COLUMN: Texts([str(t)] * n), SPAN_COLUMN: Texts([span] * n),
                                              **block.labels}, flag=None if block.flag is None else block.flag)


def _to_date_block(plan: Plan, sp: StatisticPlan, block: Block, parts: list[Noisy]) -> Block:
    t = len(parts)
    confidence = float(plan.confidence)
    meaning = KINDS[sp.statistic.kind].value
    ones = np.ones(t)
    value: LazyColumn
    low: LazyColumn
    high: LazyColumn
    if meaning is Value.COUNT:
        counts = sum_periods([_part(p.counts) for p in parts])
        k = int(linear_halfwidth(ones, sp.components[0].mechanism, _parameter(sp, 0), confidence))
        values = np.asarray(counts, dtype=np.int64)
        value, low, high = Ints(values), Ints(values, -k), Ints(values, k)
    elif meaning is Value.SUM:
        comp = sp.component("sum")
        sums = sum_periods([_part(p.sums) for p in parts])
        width = Fraction(int(linear_halfwidth(ones, comp.mechanism, _parameter(sp, 0), confidence)))
        value, low, high = (Texts([format_exact((Fraction(int(v)) + d) * comp.unit) for v in sums])
                            for d in (Fraction(0), -width, width))
    else:  # a mean: the summed noisy centred sums over the summed noisy counts
        value, low, high = _to_date_means(plan, sp, parts, confidence)
    return dataclasses.replace(block, value=value, ci_low=low, ci_high=high, flag=None)


def _part(array: np.ndarray | None) -> np.ndarray:
    if array is None:
        raise InternalError("a linear statistic's noisy state lacks a part")
    return array


def _to_date_means(plan: Plan, sp: StatisticPlan, parts: list[Noisy], confidence: float) -> tuple[Texts, ...]:
    """A mean's running total: sum over sum of count, as a release's mean (dpcli.postprocess.values.means) with
    the half-widths of the summed noises, each at (1 + confidence) / 2 so that both hold together."""
    s_comp, c_comp = sp.component("sum"), sp.component("count")
    t = len(parts)
    part = (1 + confidence) / 2
    ks = Fraction(int(linear_halfwidth(np.ones(t), s_comp.mechanism, _parameter(sp, 0), part)))
    kc = Fraction(int(linear_halfwidth(np.ones(t), c_comp.mechanism, _parameter(sp, 1), part)))
    sums = sum_periods([_part(p.sums) for p in parts])
    counts = sum_periods([_part(p.counts) for p in parts])
    return _mean_texts(plan, sp, [Fraction(int(v)) for v in sums], [Fraction(int(v)) for v in counts], ks, kc)


def _mean_texts(
    plan: Plan, sp: StatisticPlan, sums: list[Fraction], counts: list[Fraction], ks: Fraction, kc: Fraction,
) -> tuple[Texts, ...]:
    """Means from noisy centred sums and counts (grid units) with their half-widths ``ks`` and ``kc``, as a
    release's (dpcli.postprocess.values.means): clipped to the bounds, on the mean's grid; the bounds' midpoint and
    the whole range where the count (less its half-width) is not positive."""
    s_comp = sp.component("sum")
    column = plan.spec.columns[sp.statistic.column or ""]
    lo, hi = (Fraction(b) for b in column.grid_bounds)
    unit, offset = s_comp.unit, s_comp.offset
    step = unit / 10**MEAN_DIGITS_BELOW_PRECISION

    def real(x: Fraction) -> str:
        """grid units (centred) -> output units, clipped to the bounds, on the mean's grid (as a release's)."""
        return format_exact(round(min(max(x + offset, lo), hi) * unit / step) * step)

    values, lows, highs = [], [], []
    for s, n in zip(sums, counts, strict=True):
        if n - kc <= 0:
            values.append(real((lo + hi) / 2 - offset) if n <= 0 else real(s / n))
            lows.append(real(lo - offset))
            highs.append(real(hi - offset))
            continue
        values.append(real(s / n))
        low = (s - ks) / (n + kc) if s - ks >= 0 else (s - ks) / (n - kc)
        high = (s + ks) / (n - kc) if s + ks >= 0 else (s + ks) / (n + kc)
        lows.append(real(low))
        highs.append(real(high))
    return Texts(values), Texts(lows), Texts(highs)


# ---------------------------------------------------------------------------------------------------------------
# The tree's table (designs running_totals and both)


def _block(name: str) -> TreeBlock:
    """A block from its key (``b<level>.<index>``)."""
    level, _, index = name[1:].partition(".")
    return TreeBlock(int(level), int(index))


# the running totals' noisy state at t: the tree's blocks inside [1, t], or the factorisation's products 1..t
Pieces = Mapping[TreeBlock, list[Noisy]] | list[list[Noisy]]


def _parts(blocks: Pieces, i: int, role: str) -> Mapping[TreeBlock, np.ndarray] | list[np.ndarray]:
    """One noise part of statistic i in every piece."""
    if isinstance(blocks, list):
        return [_part(getattr(n[i], role)) for n in blocks]
    return {b: _part(getattr(n[i], role)) for b, n in blocks.items()}


def tree_table(splan: SeriesPlan, t: int, blocks: Pieces, own: list[Noisy] | None) -> Table:
    """Period t's table from the tree's noisy blocks inside [1, t] (Honaker's estimates, dpcli.postprocess.series)
    or the factorisation's products 1..t (dpcli.postprocess.factorization), and, under design both, the period's
    own piece: each statistic's period value (``span`` ``period``: the per-period release's, else the estimate)
    and its running total to date (``span`` ``to_date``: the estimate),
    each interval a rigorous tail bound of the estimate's combination of exact noises at the spec's confidence.
    Counts are rounded to whole numbers and sums to their grid, the intervals outwards (post-processing)."""
    plan = splan.blocks
    if plan is None:
        raise InternalError("a tree's table needs the tree")
    confidence = float(plan.confidence)
    # the labels and layout of one draw of the statistics
    template = build_table(plan, blocks[-1] if isinstance(blocks, list) else blocks[TreeBlock(0, t - 1)])
    levels = splan.multiplicity
    own_blocks = None
    if own is not None and splan.per_period is not None:
        own_blocks = build_table(dataclasses.replace(splan.per_period, periods=frozenset({t})), own).blocks
    period_rows, total_rows = [], []
    for i, (sp, block) in enumerate(zip(plan.statistics, template.blocks, strict=True)):
        # each block's share, times h (a product's, times |c_1|^2): the statistic's share of the running totals' budget
        whole = None if block.epsilon is None else block.epsilon * levels
        shown = dataclasses.replace(block, epsilon=whole, rho=None if block.rho is None else block.rho * levels)
        period, total = _tree_columns(plan, sp, i, blocks, t, confidence)
        if own_blocks is None:
            period_rows.append(_labelled(dataclasses.replace(shown, value=period[0], ci_low=period[1],
                                                             ci_high=period[2], flag=None), t, "period"))
        total_rows.append(_labelled(dataclasses.replace(shown, value=total[0], ci_low=total[1], ci_high=total[2],
                                                        flag=None), t, "to_date"))
    if own_blocks is not None:
        period_rows = [_labelled(b, t, "period") for b in own_blocks]
    return dataclasses.replace(template, dimensions=(PERIOD_COLUMN, SPAN_COLUMN, *template.dimensions),
                               blocks=(*period_rows, *total_rows))


def _tree_columns(
    plan: Plan, sp: StatisticPlan, i: int, blocks: Pieces, t: int, confidence: float,
) -> tuple[tuple[Texts, Texts, Texts], tuple[Texts, Texts, Texts]]:
    """A linear statistic's (value, ci_low, ci_high) texts for period t's own value and its running total."""
    meaning = KINDS[sp.statistic.kind].value
    if meaning is Value.MEAN:
        part = (1 + confidence) / 2
        sums = _estimate(sp, 0, _parts(blocks, i, "sums"), t, part)
        counts = _estimate(sp, 1, _parts(blocks, i, "counts"), t, part)
        out = []
        for which in (0, 1):  # the period's value, then the running total
            (s, ks), (n, kc) = sums[which], counts[which]
            out.append(_mean_texts(plan, sp, [Fraction(float(x)) for x in s], [Fraction(float(x)) for x in n],
                                   Fraction(ks), Fraction(kc)))
        return (out[0][0], out[0][1], out[0][2]), (out[1][0], out[1][1], out[1][2])
    comp = sp.components[0]
    role = "sums" if meaning is Value.SUM else "counts"
    estimates = _estimate(sp, 0, _parts(blocks, i, role), t, confidence)
    columns = []
    for values, k in estimates:
        unit = comp.unit

        def text(x: int, unit: Fraction = unit) -> str:
            return format_exact(Fraction(x) * unit)

        rounded = [round(float(v)) for v in values]
        low = [math.floor(float(v) - k) for v in values]
        high = [math.ceil(float(v) + k) for v in values]
        columns.append((Texts([text(v) for v in rounded]), Texts([text(v) for v in low]),
                        Texts([text(v) for v in high])))
    return columns[0], columns[1]


def _estimate(
    sp: StatisticPlan, index: int, noisy: Mapping[TreeBlock, np.ndarray] | list[np.ndarray], t: int,
    confidence: float,
) -> list[tuple[np.ndarray, float]]:
    """The tree's (or the factorisation's) estimates of one noise part at t, each with its half-width:
    [(period, k), (to_date, k)]."""
    comp = sp.components[index]
    parameter = _parameter(sp, index)
    if isinstance(noisy, list):
        products = estimate_products(noisy)
        return [
            (products.period, linear_halfwidth(products.period_weights, comp.mechanism, parameter, confidence)
             + float(products.period_margin.max(initial=0.0))),
            (products.to_date, linear_halfwidth(products.to_date_weights, comp.mechanism, parameter, confidence)
             + float(products.to_date_margin.max(initial=0.0))),
        ]
    estimate = estimate_tree(noisy, t, exact_noise_variance(comp.mechanism, parameter))
    return [
        (estimate.period, linear_halfwidth(estimate.period_weights, comp.mechanism, parameter, confidence)),
        (estimate.to_date, linear_halfwidth(estimate.to_date_weights, comp.mechanism, parameter, confidence)),
    ]
