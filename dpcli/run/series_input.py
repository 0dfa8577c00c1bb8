"""What a series' run reads (issue 26): its one input (a cumulative file, the day's file, standard input), or, when
the spec's ``input:`` is a per-period template (dpcli.specs.input_template) and ``--input`` does not override it,
the file of every period whose rows the pieces it draws need, each opened by dpcli itself.

    needed periods (the union of the pieces' periods) -> their files named by the template
    -> every file present (exit 3 naming the first missing one), none of them one file under two names (a row would
       count twice), none of them the output or its sidecar (exit 2), before any is opened
    -> each opened as an input is today (a stream spooled, the same caps and timeout) and its header checked
    -> a piece's exact aggregates: the sum over every opened file of the engine's aggregates of that file's rows
       whose own field puts them in the piece's periods (the field decides, never the file); the running totals'
       pieces (tree blocks, the factorisation's products) from one read of each file, its rows grouped by their
       period (``aggregate_periods``), each piece the sum (or the products' integer combination) of its periods'

Every check here is about the operator's files (their names, presence, identity), never about their content, and
all of them come before anything is spent. Exact aggregates add up over disjoint sets of rows (each file's rows are
its own), so summing a piece's aggregates over the files is the piece's aggregate over their rows together.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

import numpy as np

from dpcli.engine import ExactStatistic, aggregate, aggregate_periods, check_input
from dpcli.engine.inputs import InputFile
from dpcli.errors import InputError, InternalError
from dpcli.plan.model import Plan
from dpcli.publish.paths import check_release_paths
from dpcli.run.prepare import Prepared
from dpcli.specs.model import Spec

__all__ = ["SeriesInput", "added", "needed_periods", "period_files", "uses_template"]


def uses_template(spec: Spec, explicit_input: str | Path | None) -> bool:
    """The run reads the spec's per-period files: its ``input:`` is a template and ``--input`` does not name one
    cumulative file (or ``-``) instead."""
    return spec.input_template is not None and explicit_input is None


def period_files(spec: Spec, periods: Iterable[int]) -> list[tuple[int, Path]]:
    """Each period's file, as the spec's template names it, in period order."""
    template, series = spec.input_template, spec.series
    if template is None or series is None:
        raise InternalError("a spec's period files are named by its series' input template")
    rule = series.period
    start = None if rule.indexed else rule.start_time()
    return [(t, template.file(t, start, rule.every)) for t in sorted(set(periods))]


def needed_periods(plans: Iterable[Plan]) -> list[int]:
    """The periods whose rows the pieces (their plans) are drawn from, in order."""
    out: set[int] = set()
    for plan in plans:
        if plan.periods is None:
            raise InternalError("a series' piece is drawn from the rows of chosen periods")
        out |= plan.periods
    return sorted(out)


class SeriesInput:
    """``with SeriesInput(ready, input, periods, ...) as rows: rows.aggregate(piece_plan)``: a series' run's rows
    (see the module's docstring); ``input`` is the command line's ``--input`` (None: the spec's)."""

    def __init__(
        self,
        ready: Prepared,
        explicit_input: str | Path | None,
        periods: Iterable[int],
        max_input_bytes: int,
        on_input_bytes: Callable[[int, int | None], None] | None,
        say: Callable[[str], None],
    ):
        self.ready = ready
        self.max_input_bytes = max_input_bytes
        self.on_input_bytes = on_input_bytes
        self.say = say
        self.files: list[tuple[int | None, Path | None]] = (
            list(period_files(ready.spec, periods)) if uses_template(ready.spec, explicit_input)
            else [(None, ready.source)])
        self.paths: list[Path] = []  # the files the engine scans (a stream's private copy)
        self._stack = ExitStack()

    def __enter__(self) -> SeriesInput:
        try:
            if self.files[0][0] is not None:
                self._check_files()
            for period, source in self.files:
                src = self._stack.enter_context(
                    InputFile(source, self.ready.input_timeout, self.max_input_bytes, self.on_input_bytes))
                what = "" if period is None else f"period {period}'s file: "
                if src.spooled:
                    self.say(f"{what}input spooled")
                check_input(self.ready.spec, src.path, self.ready.input_format)
                self.say(f"{what}header has every declared column and the period field")
                self.paths.append(src.path)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.__exit__(kind, exc, tb)

    def _check_files(self) -> None:
        """Every period file present, each one file of its own, none the output or its sidecar: before any is
        opened (exit 3, or 2 for an output), so that nothing is read or spent when one is wrong."""
        ready = self.ready
        template = ready.spec.input_template
        text = "" if template is None else template.text
        periods = [t for t, _ in self.files]
        self.say(f"input template {text}: {len(self.files)} file(s), of period(s) {periods[0]}"
                 + ("" if len(periods) == 1 else f"..{periods[-1]}"))
        seen: dict[tuple[int, int], int | None] = {}
        spec_file = Path(ready.spec.source) if ready.spec.source != "<string>" else None
        for period, path in self.files:
            if path is None:
                raise InternalError("a template names a file per period")
            try:
                st = os.stat(path)
            except OSError as exc:
                raise InputError(
                    f"input {path}: period {period}'s file (input: {text}) "
                    f"{'does not exist' if not os.path.lexists(path) else exc.strerror or 'cannot be read'}: "
                    "nothing was read or spent",
                    hint="every period whose rows this run reads needs its file (a period without rows: a file with "
                         "the header line only), or pass --input with one file holding them all",
                ) from None
            identity = (st.st_dev, st.st_ino)
            if identity in seen:
                raise InputError(
                    f"input {path}: period {period}'s file is period {seen[identity]}'s file under another name (a "
                    "link): its rows would count twice; nothing was read or spent",
                    hint="give each period its own file, or pass --input with one file holding them all",
                )
            seen[identity] = period
            for target in (ready.output, ready.meta):
                check_release_paths(spec_file, path, target, ready.ledger, None)
            self.say(f"period {period}'s file: {path}")

    def aggregate(self, plan: Plan) -> list[ExactStatistic]:
        """A piece's exact aggregates over every file this run opened: each file read by the engine as an input is
        (its dialect, caps and limits), its rows filtered on their own period field (``plan.periods``)."""
        if len(self.paths) > 1 and plan.spec.privacy.person is not None:
            # a person's rows are bounded over one scan: a series under a person unit reads one period's file only
            raise InternalError("a person unit's rows are bounded within one file")
        total: list[ExactStatistic] | None = None
        for path in self.paths:
            part = aggregate(plan, path, input_format=self.ready.input_format, on_bytes=self.on_input_bytes,
                             max_input_bytes=self.max_input_bytes)
            total = part if total is None else [added(a, b) for a, b in zip(total, part, strict=True)]
        if total is None:
            raise InternalError("a series' run reads at least one file")
        return total

    def aggregate_periods(self, plan: Plan) -> dict[int, list[ExactStatistic]]:
        """Each of ``plan.periods``' exact aggregates over every file this run opened, each file read once (its rows
        grouped by their own period field): a piece of several periods is the sum of its periods' (exact integers)."""
        total: dict[int, list[ExactStatistic]] | None = None
        for path in self.paths:
            part = aggregate_periods(plan, path, input_format=self.ready.input_format, on_bytes=self.on_input_bytes,
                                     max_input_bytes=self.max_input_bytes)
            total = part if total is None else {
                t: [added(a, b) for a, b in zip(total[t], part[t], strict=True)] for t in total}
        if total is None:
            raise InternalError("a series' run reads at least one file")
        return total


def added(a: ExactStatistic, b: ExactStatistic) -> ExactStatistic:
    """Two sets of rows' exact aggregates of one statistic (two files', two periods'), added cell by cell (declared
    cells only: a series has no open keys)."""
    if a.keys is not None or b.keys is not None:
        raise InternalError("a series has no open-key statistic")

    return ExactStatistic(a.counts + b.counts, _plus(a.sums, b.sums), None, _plus(a.squares, b.squares))


def _plus(x: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
    if x is None and y is None:
        return None
    if x is None or y is None:
        raise InternalError("two files' aggregates of one statistic differ in their parts")
    total: np.ndarray = x + y  # object arrays of Python ints: exact
    return total
