"""The spec's builders and cross-field rules: a strict-YAML document -> the typed ``Spec`` (``build_spec``).

The field rules come from the declaration (``dpcli.specs.v1``); the rules JSON Schema cannot express (declared
columns, bounds and bin order, budget sums, ...) are here, each raising ``RuleError``. Every kind's typed statistic
comes from its builder in ``STATISTIC_BUILDERS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dpcli.core.accounting import format_exact
from dpcli.core.locations import is_ledger_url, is_url
from dpcli.errors import SpecError
from dpcli.specs.fields import MAX_TOTAL_DIGITS, OPEN, Loaded, Name, RuleError, list_value, undeclared
from dpcli.specs.grid import candidate_grid, quantile_bins
from dpcli.specs.input_template import DATE, InputTemplate, date_refusal, is_template
from dpcli.specs.kinds import KINDS, ColumnNeed
from dpcli.specs.model import (
    DEFAULT_MAX_RECORD_BYTES,
    Bins,
    Column,
    Count,
    CsvDialect,
    EdgeBins,
    Frequency,
    GridBins,
    Histogram,
    Mean,
    Median,
    PeriodRule,
    PersonUnit,
    PostProcess,
    Privacy,
    Quantile,
    Series,
    Spec,
    Statistic,
    Std,
    Sum,
    Synth,
    SynthColumn,
    Target,
    TopK,
    Variance,
    clamps_persons,
    counts_persons,
    open_dimensions,
)
from dpcli.specs.v1 import (
    ALWAYS_COLUMNS,
    BOOL_KEYS,
    COLUMN,
    CSV,
    DEFAULT_KEY_LENGTH,
    DEFAULT_SYNTH_MAX_CELLS,
    FLAG_COLUMN,
    MAX_CANDIDATES,
    MAX_CELLS,
    MAX_FACTORIZATION_PERIODS,
    PERIOD_COLUMN,
    POSTPROCESS,
    PRIVACY,
    QUANTILE_COLUMN,
    SERIES,
    SOMETIMES_COLUMNS,
    SPAN_COLUMN,
    STATISTIC,
    SYNTH,
    TOP,
    GridSpec,
)

# A cell's fixed-point value must fit in 2^53 so that the float -> grid conversion is exact and sums stay far from
# int64 limits per row (sums themselves run in 128-bit integers).
MAX_GRID_UNITS = 2**53


# ---------------------------------------------------------------------------------------------------------------
# Loading: the field rules come from the declaration (dpcli.specs.v1); the cross-field rules, which JSON Schema
# cannot express, are below and raise RuleError


class ErrorCollector:
    """Where errors go: raised at once (``errors`` None), or collected so that every error is reported."""

    def __init__(self, errors: list[SpecError] | None):
        self.errors = errors

    @property
    def list(self) -> list[SpecError] | None:
        return self.errors

    def count(self) -> int:
        return len(self.errors) if self.errors is not None else 0

    def attempt(self, fn: Any, *args: Any) -> Any:
        """fn(*args), or None after recording its SpecError."""
        try:
            return fn(*args)
        except SpecError as exc:
            if self.errors is None:
                raise
            self.errors.append(exc)
            return None


def default_precision(lo: Fraction, hi: Fraction) -> Fraction:
    """Default grid step of a float column: the power of ten that puts 10^6 to 10^7 steps across [lo, hi]."""
    width = hi - lo
    exp = 0
    while Fraction(10) ** (exp + 1) <= width:
        exp += 1
    while Fraction(10) ** exp > width:
        exp -= 1
    return Fraction(10) ** (exp - 6)


def build_column(name: str, raw: Any, out: ErrorCollector) -> Column | None:
    path = f"columns.{name}"
    Name("column name").load(path, name)
    before = out.count()
    ctype, f = COLUMN.load(path, raw, out.list)
    if out.count() > before:
        return None  # a field is bad: the column's own cross-field rules would only repeat it
    if ctype in ("int", "float"):
        lo, hi = f["bounds"]
        if not lo < hi:
            raise RuleError(f"{path}.bounds", "low must be less than high")
        precision = Fraction(1) if ctype == "int" else f.get("precision") or default_precision(lo, hi)
        column = Column(name, ctype, bounds=(lo, hi), precision=precision)
        glo, ghi = column.grid_bounds
        if glo >= ghi:
            raise RuleError(f"{path}.precision", "precision is too coarse: the bounds hold fewer than two grid points")
        if max(abs(glo), abs(ghi)) > MAX_GRID_UNITS:
            raise RuleError(
                f"{path}.precision",
                f"bounds/precision exceed 2^53 grid steps: use a coarser precision (now {format_exact(precision)})",
            )
        impute = f.get("impute")
        if impute is not None:
            if not lo <= impute <= hi:
                raise RuleError(f"{path}.impute", "must lie within the column's bounds")
            if ctype == "int" and impute.denominator != 1:
                raise RuleError(f"{path}.impute", "an int column needs a whole-number impute value", rule="text range")
        return replace(column, impute=impute)
    if f.get("categories") == OPEN:
        for key in ("impute", "other"):
            if key in f:
                raise RuleError(f"{path}.{key}", "not allowed for an open column (its keys come from the data)")
        return Column(name, ctype, open=True, max_length=f.get("max_length", DEFAULT_KEY_LENGTH))
    if "max_length" in f:
        raise RuleError(f"{path}.max_length", "only for an open column (categories: open)")
    keys: tuple[str, ...] = BOOL_KEYS if ctype == "bool" else f["categories"]
    impute_key, other_key = f.get("impute"), f.get("other")
    if impute_key is not None and impute_key not in keys:
        raise RuleError(f"{path}.impute", f"'{impute_key[:60]}' is not one of the declared keys")
    if other_key is not None and other_key not in keys:
        raise RuleError(f"{path}.other", f"'{other_key[:60]}' is not one of the declared categories")
    return Column(name, ctype, categories=keys, impute=impute_key, other=other_key)


def _bins(path: str, raw: tuple[Fraction, ...] | GridSpec) -> Bins:
    if isinstance(raw, tuple):
        for i in range(1, len(raw)):
            if raw[i] == raw[i - 1]:
                raise RuleError(f"{path}[{i}]", "duplicate bin edge")
            if raw[i] < raw[i - 1]:
                raise RuleError(f"{path}[{i}]", "bin edges must be increasing")
        return EdgeBins(raw)
    if not raw.start < raw.stop:
        raise RuleError(f"{path}.stop", "must be greater than start")
    n = (raw.stop - raw.start) / raw.step
    if n.denominator != 1:
        raise RuleError(f"{path}.step", "(stop - start) must be a whole number of steps")
    if n > MAX_CELLS:
        raise RuleError(f"{path}.step", f"{n} bins is over the limit of {MAX_CELLS}")
    return GridBins(raw.start, raw.stop, raw.step)


def _reserved(name: str) -> str:
    sometimes = "; ".join(f"{c} in {where}" for c, where in SOMETIMES_COLUMNS.items())
    return (
        f"'{name}' cannot be an output dimension: the table already has a column of that name "
        f"({', '.join(ALWAYS_COLUMNS)}; {sometimes})"
    )


def _statistic(path: str, kind: str, f: Loaded, columns: Mapping[str, Column]) -> Statistic:
    """The typed statistic, after its cross-field rules (declared columns of a suitable type, bins, cells)."""
    column_name: str | None = f.get("column")
    column = None
    if column_name is not None:
        if column_name not in columns:
            raise RuleError(f"{path}.column", undeclared(column_name, columns))
        column = columns[column_name]
    by: list[str] = []
    for j, b in enumerate(f.get("by", ())):
        if b not in columns:
            raise RuleError(f"{path}.by[{j}]", undeclared(b, columns))
        if columns[b].numeric:
            raise RuleError(
                f"{path}.by[{j}]", f"'{b}' is numeric: group by category or bool columns, or use a histogram with bins"
            )
        if b in by or b == column_name:
            raise RuleError(f"{path}.by[{j}]", f"'{b}' is used twice")
        if b in ALWAYS_COLUMNS:
            raise SpecError(f"{path}.by[{j}]", _reserved(b))
        by.append(b)
    if column is not None and KINDS[kind].column is ColumnNeed.NUMERIC and not column.numeric:
        raise RuleError(f"{path}.column", f"a {kind} needs a numeric column; '{column.name}' is {column.type}")
    common: dict[str, Any] = {
        k: f[k] for k in ("name", "weight", "epsilon", "rho", "mechanism", "delta", "expected_rows") if k in f
    }
    if "target" in f:
        common["target"] = Target(f["target"]["error95"], Fraction(95, 100))
    stat = STATISTIC_BUILDERS[kind](_Declared(path, kind, f, column, tuple(by), common))
    _open_keys(path, stat, columns)
    cells = 1
    for d in stat.dimensions:
        dim = columns[d]
        if dim.open:
            continue  # observed keys, selected privately: not known before the release
        cells *= stat.bins.count if (d == column_name and stat.bins is not None) else len(dim.keys)
    if isinstance(stat, Quantile):
        cells *= quantile_bins(stat, columns[stat.column])
    if cells > MAX_CELLS:
        raise RuleError(path, f"{cells} cells is over the limit of {MAX_CELLS} per statistic")
    return stat


@dataclass(frozen=True)
class _Declared:
    """One statistic's fields as the declaration read them, its column and by: checked: what its kind's builder
    makes its typed statistic from."""

    path: str
    kind: str
    f: Loaded
    column: Column | None
    by: tuple[str, ...]
    common: dict[str, Any]  # the fields every statistic has, as its class's keyword arguments

    @property
    def named(self) -> Column:
        """The statistic's column (every kind but a count has one: the declaration requires it)."""
        if self.column is None:  # the declaration requires it (STATISTIC's variants): never reached
            raise SpecError(f"{self.path}.column", f"required for a {self.kind}")
        return self.column


def _count(d: _Declared) -> Statistic:
    return Count(by=d.by, of=d.f.get("of", "rows"), **d.common)


def _histogram(d: _Declared) -> Statistic:
    column, path, f = d.named, d.path, d.f
    bins = None
    if column.name in ALWAYS_COLUMNS:
        raise SpecError(f"{path}.column", _reserved(column.name))
    if column.numeric:
        if "bins" not in f:
            raise RuleError(
                f"{path}.bins", "required for a histogram of a numeric column (edges or {start, stop, step})"
            )
        bins = _bins(f"{path}.bins", f["bins"])
    elif "bins" in f:
        raise RuleError(f"{path}.bins", "a histogram of a category or bool column has one bin per declared key")
    return Histogram(column=column.name, by=d.by, bins=bins, **d.common)


def _top_k(d: _Declared) -> Statistic:
    column, path, f = d.named, d.path, d.f
    if column.numeric:
        raise RuleError(
            f"{path}.column",
            f"a {d.kind} ranks the keys of a category or bool column; '{column.name}' is {column.type}",
        )
    if column.name in ALWAYS_COLUMNS:
        raise SpecError(f"{path}.column", _reserved(column.name))
    if not column.open and f.get("k", 1) > len(column.keys):
        raise RuleError(f"{path}.k", f"k is {f['k']}, more than the {len(column.keys)} keys of '{column.name}'")
    return TopK(kind=d.kind, column=column.name, by=d.by, k=f.get("k", 1), **d.common)


def _frequency(d: _Declared) -> Statistic:
    column, path = d.named, d.path
    if column.numeric or column.open:
        raise RuleError(f"{path}.column", f"'{column.name}' is {'open' if column.open else column.type}: a "
                        "frequency is estimated over the declared keys of a category or bool column")
    if column.name in ALWAYS_COLUMNS:
        raise SpecError(f"{path}.column", _reserved(column.name))
    return Frequency(column=column.name, randomized_epsilon=d.f["randomized"]["epsilon"], **d.common)


def _sum(d: _Declared) -> Statistic:
    return Sum(column=d.named.name, by=d.by, clamp=d.f.get("clamp"), **d.common)


def _mean(d: _Declared) -> Statistic:
    return Mean(column=d.named.name, by=d.by, clamp=d.f.get("clamp"), **d.common)


def _quantile_statistic(d: _Declared) -> Statistic:
    return _quantile(d.path, d.kind, d.f, d.named, d.by, d.common)


def _variance(d: _Declared) -> Statistic:
    return Variance(column=d.named.name, by=d.by, **d.common)


def _std(d: _Declared) -> Statistic:
    return Std(column=d.named.name, by=d.by, **d.common)


# Each kind's typed statistic from its declared fields (its traits: dpcli/specs/kinds.py; tests/specs/test_kinds.py
# checks that
# every kind has its builder)
STATISTIC_BUILDERS: Mapping[str, Callable[[_Declared], Statistic]] = MappingProxyType({
    "count": _count, "histogram": _histogram, "sum": _sum, "mean": _mean, "quantile": _quantile_statistic,
    "median": _quantile_statistic, "top_k": _top_k, "mode": _top_k, "variance": _variance, "std": _std,
    "frequency": _frequency,
})


def _quantile(
    path: str, kind: str, f: Loaded, column: Column, by: tuple[str, ...], common: dict[str, Any]
) -> Quantile:
    """A quantile's candidate grid: ``step`` a whole number of the column's grid steps, at most MAX_CANDIDATES."""
    grid_step = column.grid_step  # a numeric column's (the kind's column need is checked before its builder runs)
    step = f.get("step")
    units = Fraction(1) if step is None else step / grid_step
    if units.denominator != 1:
        precision = format_exact(grid_step)
        raise RuleError(f"{path}.step", f"must be a whole number of the column's grid steps (precision {precision})")
    _, _, candidates = candidate_grid(column, step)
    if candidates > MAX_CANDIDATES:
        given = (
            f"step {format_exact(step)}" if step is not None
            else f"the column's precision {format_exact(grid_step)}"
        )
        raise RuleError(
            f"{path}.step" if step is not None else path,
            f"{candidates} candidates at {given} is over the limit of {MAX_CANDIDATES}: give a coarser step",
        )
    if candidates < 2:
        raise RuleError(f"{path}.step", "leaves fewer than two candidates within the column's bounds")
    share = f["interval"]["share"] if "interval" in f else None
    if kind == "median":
        return Median(column=column.name, by=by, step=step, interval_share=share, **common)
    return Quantile(column=column.name, by=by, levels=tuple(sorted(f["q"])), step=step, interval_share=share, **common)


def _open_keys(path: str, stat: Statistic, columns: Mapping[str, Column]) -> None:
    """Open keys are released only through partition selection of noisy counts (dpcli.plan.model.Selection)."""
    opened = open_dimensions(stat, columns)
    if not opened:
        if stat.delta is not None:
            raise RuleError(f"{path}.delta", "only for a statistic with open keys (its partition selection's delta)")
        return
    if not KINDS[stat.kind].open_keys:
        raise RuleError(
            f"{path}.column" if KINDS[stat.kind].has_bins else f"{path}.by",
            f"open keys ('{opened[0]}') are released only by counts and histograms (a key is released with its "
            "noisy count)",
        )
    if isinstance(stat, TopK) and stat.by:
        raise RuleError(
            f"{path}.by", f"a {stat.kind} with by: ranks declared keys in declared cells ('{opened[0]}' is open)"
        )
    if len(opened) > 1:
        raise RuleError(f"{path}.by", f"at most one open column per statistic ('{opened[0]}', '{opened[1]}')")
    if stat.mechanism != "laplace":
        raise RuleError(f"{path}.mechanism", "open keys are selected with discrete Laplace noise: use laplace")


def _budget_rules(unit: str, budget_stated: bool, stats: list[Statistic]) -> None:
    """How the statistics share the budget, in ``unit`` ("epsilon" or "rho"): the loader's part. Computing the split,
    and refusing named shares that add up to more than the budget, is planning's (dpcli.plan.budget.split_budget)."""
    other = "rho" if unit == "epsilon" else "epsilon"
    for i, s in enumerate(stats):
        if getattr(s, other) is not None:
            mode = (
                "a pure epsilon release" if unit == "epsilon" else "a zCDP release (privacy.rho, or epsilon with delta)"
            )
            raise RuleError(f"statistics[{i}].{other}", f"not used in {mode}: give each statistic's {unit} or a weight")
    named: list[Fraction | None] = [getattr(s, unit) for s in stats]
    if any(x is not None for x in named) and None in named:
        raise RuleError(
            f"statistics[{named.index(None)}].{unit}",
            f"either every statistic names its {unit}, or none does (use weight)",
        )
    if None not in named:
        _total([x for x in named if x is not None], unit)
        return
    if not budget_stated:
        raise RuleError(f"privacy.{unit}", f"required field is missing (or give every statistic its own {unit})")
    _total([s.weight if s.weight is not None else Fraction(1) for s in stats], "weight")


def _total(values: list[Fraction], field: str) -> None:
    """Refuse a sum once a partial sum has more than MAX_TOTAL_DIGITS digits: weights such as 1/p for distinct
    40-digit primes would give every share a denominator growing with the number of statistics (and a sum whose cost
    grows with its square)."""
    cap = 10**MAX_TOTAL_DIGITS
    total = Fraction(0)
    for i, x in enumerate(values):
        total += x
        if abs(total.numerator) >= cap or total.denominator >= cap:
            raise RuleError(
                f"statistics[{i}].{field}",
                f"the exact sum of the {field}s up to here has over {MAX_TOTAL_DIGITS} digits in its numerator or "
                f"denominator: use {field}s with fewer digits (decimals, or fractions with a common denominator)",
            )


def _privacy(priv: Loaded, stats: list[Statistic], columns: Mapping[str, Column]) -> Privacy:
    """The privacy section's cross-field rules.

    - ``epsilon`` alone: a pure epsilon-DP release (Laplace mechanisms only);
    - ``rho`` (optionally with ``delta``, shown in the plan): a rho-zCDP release;
    - ``epsilon`` with ``delta``: a zCDP release whose rho the planner converts (dpcli.plan.budget.split_budget); it
    needs at
      least one ``mechanism: gaussian`` statistic.
    """
    raw_unit, neighbours = priv.get("unit", "row"), priv.get("neighbours", "add_remove")
    eps, delta, rho = priv.get("epsilon"), priv.get("delta"), priv.get("rho")
    if any(isinstance(s, Frequency) for s in stats):
        return _frequency_privacy(priv, stats)
    gaussian = [i for i, s in enumerate(stats) if s.mechanism == "gaussian"]
    opened = [i for i, s in enumerate(stats) if open_dimensions(s, columns)]
    explicit_rho = bool(stats) and all(s.rho is not None for s in stats)
    if eps is not None and delta is not None and not gaussian and not opened:
        raise RuleError(
            "privacy.delta", "only used by a release with a mechanism: gaussian statistic or open keys"
        )
    if opened and delta is None:
        raise RuleError(
            "privacy.delta",
            f"required: statistics[{opened[0]}] has open keys, whose partition selection spends a delta",
        )
    # epsilon with delta is a zCDP budget when a statistic is Gaussian; with open keys alone it stays pure (the delta
    # is the partition selections')
    zcdp = rho is not None or (eps is not None and delta is not None and bool(gaussian))
    zcdp = zcdp or (eps is None and explicit_rho)
    if not zcdp and gaussian:
        raise RuleError(
            f"statistics[{gaussian[0]}].mechanism",
            "gaussian needs a zCDP budget: privacy.rho, or privacy.epsilon with privacy.delta",
        )
    if zcdp:
        _budget_rules("rho", rho is not None or eps is not None, stats)
    else:
        _budget_rules("epsilon", eps is not None, stats)
    person = _person_unit(raw_unit, stats, columns) if isinstance(raw_unit, dict) else None
    if person is None:
        for i, s in enumerate(stats):
            if counts_persons(s) or clamps_persons(s):
                field = "of" if isinstance(s, Count) else "clamp"
                raise RuleError(f"statistics[{i}].{field}", "needs a person unit (privacy.unit: {id: FIELD, ...})")
    if opened and delta is not None:
        _selection_deltas(delta, zcdp, [stats[i] for i in opened], opened)
    return Privacy(
        "person" if person is not None else "row", neighbours, eps, delta, rho, "zcdp" if zcdp else "pure", person
    )


def _frequency_privacy(priv: Loaded, stats: list[Statistic]) -> Privacy:
    """A release of frequency statistics reads a randomized file (published data) and spends nothing: it holds
    nothing else, and states no budget and no person unit (the randomized file's own spend covers it)."""
    other = next((i for i, s in enumerate(stats) if not isinstance(s, Frequency)), None)
    if other is not None:
        raise RuleError(f"statistics[{other}].kind", "a spec with frequency statistics reads a randomized file: "
                        "other statistics belong in a spec of their own")
    for key in ("epsilon", "delta", "rho"):
        if key in priv:
            raise RuleError(f"privacy.{key}", "frequency statistics spend nothing (their input is a randomize "
                            "output, already paid for): leave the budget out")
    if isinstance(priv.get("unit", "row"), dict):
        raise RuleError("privacy.unit", "randomize protects each row: frequency statistics take unit: row")
    return Privacy("row", priv.get("neighbours", "replace"), None)


def _person_unit(raw: Loaded, stats: list[Statistic], columns: Mapping[str, Column]) -> PersonUnit:
    unit = PersonUnit(
        raw["id"], raw["max_rows"], raw.get("max_groups"), raw.get("max_rows_per_group"), raw["missing_id"]
    )
    if unit.id in columns:
        raise RuleError(
            "privacy.unit.id", f"'{unit.id[:60]}' is a declared column: person ids are not public, leave it undeclared"
        )
    for i, s in enumerate(stats):
        if isinstance(s, Sum | Mean) and s.clamp is None:
            raise RuleError(
                f"statistics[{i}].clamp",
                "required under a person unit: row (clamp each row's value) or person (clamp each person's total)",
            )
    return unit


def _selection_deltas(delta: Fraction, zcdp: bool, opened: list[Statistic], where: list[int]) -> None:
    """The deltas partition selections spend come out of privacy.delta: named per statistic (``delta:``), or in a
    pure release split evenly. A zCDP release keeps the rest for its conversion, so there each is named and they
    leave some of privacy.delta."""
    named = [s.delta for s in opened]
    if zcdp and None in named:
        raise RuleError(
            f"statistics[{where[named.index(None)]}].delta",
            "required in a zCDP release: the delta this statistic's partition selection spends (the rest of "
            "privacy.delta goes to the zCDP conversion)",
        )
    if None in named and any(x is not None for x in named):
        raise RuleError(
            f"statistics[{where[named.index(None)]}].delta",
            "either every open-key statistic names its delta, or none does (privacy.delta is then split evenly)",
        )
    total = sum((x for x in named if x is not None), Fraction(0))
    if zcdp and total >= delta:
        raise RuleError(
            f"statistics[{where[0]}].delta",
            f"the selections' deltas add up to {format_exact(total)}, which leaves nothing of privacy.delta = "
            f"{format_exact(delta)} for the zCDP conversion",
        )
    if total > delta:
        raise RuleError(
            f"statistics[{where[0]}].delta",
            f"the selections' deltas add up to {format_exact(total)}, more than privacy.delta = {format_exact(delta)}",
        )


def _postprocess(
    top: Loaded | None, stats: Sequence[Statistic], own: Sequence[Loaded | None]
) -> dict[str, PostProcess]:
    """Each statistic's post-processing: its own ``postprocess:`` key by key over the top level's. Statistics with
    none are left out. The top level's ``consistent: true`` applies to counts and histograms only."""
    out: dict[str, PostProcess] = {}
    for i, (st, mine) in enumerate(zip(stats, own, strict=True)):
        if mine is not None and mine.get("consistent") == "true" and not KINDS[st.kind].consistent:
            raise RuleError(f"statistics[{i}].postprocess.consistent", "applies to counts and histograms only")
        if not KINDS[st.kind].postprocess:
            continue
        f = {**(top or {}), **(mine or {})}
        if not f:
            continue
        cells = f.get("small_cells")
        out[st.name] = PostProcess(
            digits=f.get("digits"),
            nonnegative=f.get("nonnegative") == "true",
            consistent=f.get("consistent") == "true" and KINDS[st.kind].consistent,
            max_relative_width=None if cells is None else cells["max_relative_width"],
            small_cells=None if cells is None else cells["action"],
        )
    return out


def csv_dialect(csv: Loaded, header: Any) -> CsvDialect:
    """The typed ``csv:`` section (``header``: True, or the field names of a file without a header line), one rule for
    a release spec and a synth spec."""
    return CsvDialect(
        delimiter="\t" if csv.get("delimiter") == "tab" else csv.get("delimiter"),
        encoding=csv.get("encoding", "utf-8"),
        header=header is True,
        names=header if isinstance(header, tuple) else None,
        line_end=csv.get("line_end"),
        max_record_bytes=csv.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES),
    )


def build_spec(doc: Any, source: str, base_dir: Path | None, sha256: str, out: ErrorCollector) -> Spec | None:
    """The typed Spec from a strict-YAML document (``sha256``: its text's), or None when ``out`` collected an
    error: the field rules through the declaration, then the cross-field rules."""
    top = TOP.keys("", doc if doc is not None else {}, out.list)
    fields: Loaded = {
        key: out.attempt(TOP.fields[key].load, key, top[key])
        for key in ("version", "dataset", "name", "input", "output", "ledger", "input_format", "engine", "confidence",
                    "expected_rows")
        if key in top
    }
    csv = out.attempt(CSV.load, "csv", top["csv"], out.list) if "csv" in top else {}
    priv = out.attempt(PRIVACY.load, "privacy", top["privacy"], out.list)

    columns: dict[str, Column] = {}
    bad_columns: set[str] = set()  # declared, but refused: statistics naming them are not checked further
    raw_columns = top["columns"]
    if not isinstance(raw_columns, dict) or not raw_columns:
        out.attempt(_raise, SpecError("columns", "expected a mapping of at least one column"))
        raw_columns = {}
    for name, body in raw_columns.items():
        column = out.attempt(build_column, name, body, out)
        if column is None:
            bad_columns.add(name)
        else:
            columns[name] = column

    if "synth" in top:
        return _synth_spec(top, fields, csv, priv, columns, bad_columns, source, base_dir, sha256, out)
    if "statistics" not in top:
        out.attempt(_raise, SpecError("statistics", "required field is missing"))
        return None
    raw_stats = out.attempt(list_value, "statistics", top["statistics"], 1) or []
    loaded: list[tuple[str, Loaded] | None] = [
        out.attempt(STATISTIC.load, f"statistics[{i}]", raw, out.list) for i, raw in enumerate(raw_stats)
    ]
    stats: list[Statistic] = []
    stat_index: list[int] = []  # each one's place in the spec's list
    names: set[str] = set()
    for i, tagged in enumerate(loaded):
        # a statistic's cross-field rules need its fields and the columns it names, all loaded
        named = () if tagged is None else (tagged[1].get("column"), *tagged[1].get("by", ()))
        if tagged is None or "name" not in tagged[1] or any(n in bad_columns for n in named):
            continue  # (a name that did not load is reported already)
        st = out.attempt(_statistic, f"statistics[{i}]", *tagged, columns)
        if st is None:
            continue
        if st.name in names:
            out.attempt(_raise, RuleError(f"statistics[{i}].name", f"duplicate statistic name '{st.name}'"))
        names.add(st.name)
        stats.append(st)
        stat_index.append(i)
    header = csv.get("header", True) if csv is not None else True
    if isinstance(header, tuple):
        undeclared = [name for name in columns if name not in header]
        if undeclared:
            out.attempt(_raise, RuleError(
                "csv.header", f"declared column(s) not among the fields it names: {', '.join(undeclared)[:200]}"
            ))
    top_post = (
        out.attempt(POSTPROCESS.load, "postprocess", top["postprocess"], out.list)
        if "postprocess" in top
        else {}
    )
    own_post = [None if t is None else t[1].get("postprocess") for t in loaded]
    postprocess = out.attempt(_postprocess, top_post, stats, own_post) if len(stats) == len(raw_stats) else None
    # the table's columns of some releases only (a quantile's level, the small-cell flag): no dimension of that name
    # in a release whose table has it
    present = {
        QUANTILE_COLUMN: any(isinstance(st, Quantile) for st in stats),
        PERIOD_COLUMN: "series" in top,
        SPAN_COLUMN: "series" in top,
        FLAG_COLUMN: any(p.small_cells is not None for p in (postprocess or {}).values()),
    }
    for i, st in zip(stat_index, stats, strict=True):
        by: tuple[str, ...] = getattr(st, "by", ())
        for name in st.dimensions:
            if present.get(name):
                where = f"by[{by.index(name)}]" if name in by else "column"
                out.attempt(_raise, SpecError(f"statistics[{i}].{where}", _reserved(name)))
    if priv is None or len(stats) != len(raw_stats) or out.count():
        return None
    privacy = _privacy(priv, stats, columns)
    if privacy.person is not None and header is not True:
        input_fields = header if isinstance(header, tuple) else tuple(columns)
        if privacy.person.id not in input_fields:
            out.attempt(_raise, RuleError(
                "privacy.unit.id", f"'{privacy.person.id[:60]}' is not among the input's fields: name it in csv.header"
            ))
            return None
    series = None
    if "series" in top:
        before = out.count()
        raw_series = out.attempt(SERIES.load, "series", top["series"], out.list)
        # a field error recorded while loading (a required field missing) leaves a partial section: its cross-field
        # rules are not asked of it (they would look up the missing field)
        if raw_series is not None and out.count() == before:
            series = out.attempt(_series, raw_series, stats, columns, privacy, header)
        if series is None or out.count():
            return None
    if csv and any(isinstance(s, Frequency) for s in stats):
        # a randomize output is comma-separated UTF-8 with a header line: another dialect would read every cell as
        # missing and estimate every frequency from zero counts, without a word
        out.attempt(_raise, RuleError(
            "csv", "a frequency statistic reads a `dpcli randomize` output (comma-separated UTF-8 with a header line): "
            "leave csv: out"
        ))
        return None
    template = out.attempt(_input_template, fields.get("input"), series,
                           base_dir if base_dir is not None else Path("."))
    if out.count():
        return None

    return Spec(
        **_shared_fields(fields, csv, header, base_dir, source, sha256),
        privacy=privacy,
        columns=MappingProxyType(columns),
        statistics=tuple(stats),
        expected_rows=fields.get("expected_rows"),
        postprocess=MappingProxyType(postprocess or {}),
        series=series,
        input_template=template,
    )


def _shared_fields(
    fields: Loaded, csv: Loaded, header: Any, base_dir: Path | None, source: str, sha256: str,
) -> dict[str, Any]:
    """The Spec's fields that a release spec and a synth spec read alike from the top level, ``csv:`` and where the
    spec lies: one place, so that a field added later reaches both."""
    base = base_dir if base_dir is not None else Path(".")

    def path_field(key: str) -> Path | None:
        p = fields.get(key)
        return None if p is None else Path("-") if p == "-" else base / p

    text, ledger = fields.get("input"), fields.get("ledger")
    return {
        "version": fields["version"],
        "dataset": fields["dataset"],
        # a URL (hdfs://, s3a://: the Spark engine's) stays as written; a Path would fold its "//"
        "input": text if is_url(text) else path_field("input"),
        "output": path_field("output"),
        # a PostgreSQL URL stays text (Ledger in dpcli.specs.fields refuses one with a password)
        "ledger": ledger if ledger is not None and is_ledger_url(ledger) else path_field("ledger"),
        "source": source,
        "sha256": sha256,
        "quoted_line_breaks": csv.get("quoted_line_breaks") == "true",
        "csv": csv_dialect(csv, header),
        "input_format": fields.get("input_format"),
        "engine": fields.get("engine", "polars"),
        "confidence": fields.get("confidence", Fraction(95, 100)),
        "name": fields.get("name"),
    }


def _input_template(text: str | None, series: Series | None, base: Path) -> InputTemplate | None:
    """``input:`` naming one file per period (dpcli.specs.input_template): a series' only, local, and ``{date}``
    only where it names each period's first hour or day; None for a plain path, ``-`` or a URL without one."""
    if text is None or not is_template(text):
        return None
    if is_url(text):
        raise RuleError("input", "a template ({date}, {period}) names local files that dpcli opens itself, one per "
                        "period: not a URL")
    if series is None:
        raise RuleError("input", "a template ({date}, {period}) names one file per period of a series: this spec has "
                        "no series: (give one file)")
    if series.method == "factorization":
        # every product reads periods 1..t: each run would open every period's file so far (up to 10,000)
        raise RuleError("input", "a template ({date}, {period}) is not read by method factorization: its run at "
                        "period t reads every period 1..t, so it would open t files each run; give one cumulative "
                        "file (input:, or --input)")
    rule = series.period
    if DATE in text:
        refusal = date_refusal(None if rule.indexed else rule.start_time(), rule.every)
        if refusal is not None:
            raise RuleError("input", refusal)
    return InputTemplate(base, text)


def _series(
    raw: Loaded, stats: list[Statistic], columns: Mapping[str, Column], privacy: Privacy, header: Any,
) -> Series:
    """``series:``'s cross-field rules (docs/spec.md, "Series"): start and every together; the period field is an
    input field, not a declared column; no open keys (their keys are chosen from each period's data, so a row's
    period would decide what the series publishes) and no frequency (it spends nothing); running totals for the
    linear kinds only, never under a person unit; ``running_share`` with design ``both`` only. ``monotone`` applies
    to the running totals to date of counts whichever design publishes them (per_period: the sums of the released
    periods; running_totals and both: the tree's)."""
    period = raw["period"]
    design = raw.get("design", "per_period")
    if ("start" in period) != ("every" in period):
        missing = "every" if "start" in period else "start"
        raise RuleError(f"series.period.{missing}", "give start and every together (a date field), or neither (a "
                        "field holding the period's index 1..T)")
    field = period["column"]
    if field in columns:
        raise RuleError("series.period.column", f"'{field[:60]}' is a declared column: the period field is an input "
                        "field of its own (its values are data, the periods' boundaries are public)")
    if header is not True:
        input_fields = header if isinstance(header, tuple) else tuple(columns)
        if field not in input_fields:
            raise RuleError("series.period.column",
                            f"'{field[:60]}' is not among the input's fields: name it in csv.header")
    for i, s in enumerate(stats):
        if open_dimensions(s, columns):
            raise RuleError(f"statistics[{i}]", "open keys are not allowed in a series: the keys a period publishes "
                            "would be chosen from its rows; declare the categories")
        if isinstance(s, Frequency):
            raise RuleError(f"statistics[{i}].kind", "a frequency spends nothing: it has no place in a series")
    running = design in ("running_totals", "both")
    if running:
        for i, s in enumerate(stats):
            if not KINDS[s.kind].linear:
                raise RuleError(f"statistics[{i}].kind", f"a {s.kind} has no running total (it does not add up over "
                                "periods): use series design per_period, or a spec of its own")
        if privacy.person is not None:
            raise RuleError("series.design", "running totals are refused under a person unit: one person may have "
                            "rows in many periods, and bounding their rows across runs would need their ids kept "
                            "between runs, which dpcli never stores; use design per_period (a person present in k "
                            "periods then has k times the budget), or unit row")
    share = raw.get("running_share")
    if share is not None and design != "both":
        raise RuleError("series.running_share", "only with design both (the running totals' share of the budget)")
    monotone = raw.get("monotone") == "true"
    method = raw.get("method", "tree")
    if method == "factorization":
        _factorization_rules(raw, stats, privacy, running)
    rule = PeriodRule(field, period.get("start"), period.get("every"))
    return Series(raw["periods"], rule, design, share if share is not None or design != "both" else Fraction(1, 2),
                  monotone, method)


def _factorization_rules(raw: Loaded, stats: list[Statistic], privacy: Privacy, running: bool) -> None:
    """``method: factorization`` (docs/spec.md, "Series"): running totals only; Gaussian noise under zCDP (its
    sensitivity is an L2 norm: its L1 grows like sqrt(T)); add_remove only (under replace a row moving from period
    s to s' changes the products by the difference of two columns of the lattice matrix: |c_1|^2 times the by:[period]
    l2^2 bounds it, 1.24x too much for a plain count at T = 365, and the exact maximum per noise component is not
    planned: docs/spec.md); a horizon of at most MAX_FACTORIZATION_PERIODS."""
    if not running:
        raise RuleError("series.method", "a running-totals method: only with design running_totals or both")
    if privacy.accounting != "zcdp":
        raise RuleError("series.method", "factorization adds Gaussian noise (its sensitivity is an L2 norm, its L1 "
                        "grows like sqrt(T)): give privacy a rho (zCDP), or use method tree")
    for i, s in enumerate(stats):
        if s.mechanism != "gaussian":
            raise RuleError(f"statistics[{i}].mechanism", "series method factorization draws Gaussian noise only: "
                            "use mechanism gaussian, or method tree")
    if privacy.neighbours == "replace":
        raise RuleError("series.method", "factorization is offered under add_remove only: under replace a row "
                        "moving between periods changes the products by the difference of two lattice columns, a "
                        "bound this version does not compute; use method tree (its replace bound is exact)")
    if raw["periods"] > MAX_FACTORIZATION_PERIODS:
        raise RuleError("series.periods", f"at most {MAX_FACTORIZATION_PERIODS} periods with method factorization "
                        "(its run at period t aggregates each of periods 1..t): use method tree")


def _raise(exc: SpecError) -> None:
    raise exc




# ---------------------------------------------------------------------------------------------------------------
# synth: (issue 27): a synthetic CSV of the declared columns from noisy marginals (docs/spec.md, "Synthetic data")


def _synth_spec(
    top: Loaded, fields: Loaded, csv: Loaded | None, priv: Loaded | None, columns: dict[str, Column],
    bad_columns: set[str], source: str, base_dir: Path | None, sha256: str, out: ErrorCollector,
) -> Spec | None:
    """A synth spec: the top level's shared fields, a zCDP row-level budget and ``synth:`` in place of
    ``statistics:`` (its Spec has no statistics). Its refusals are the rules JSON Schema cannot express."""
    for key, why in (
        ("statistics", "a spec publishes statistics or a synthetic CSV, not both: put the statistics in a spec of "
                       "their own"),
        ("series", "a synthetic CSV is one release, not a series of periods"),
        ("postprocess", "applies to statistics; a synthetic CSV is post-processed by its own estimation"),
        ("expected_rows", "planning of statistics' errors; a synthetic CSV's plan gives each marginal's noise"),
    ):
        if key in top:
            out.attempt(_raise, RuleError(key, why))
    raw = out.attempt(SYNTH.load, "synth", top["synth"], out.list)
    if raw is None or priv is None or csv is None or out.count():
        return None
    privacy = out.attempt(_synth_privacy, priv)
    synth = out.attempt(_synth, raw, columns, bad_columns)
    text = fields.get("input")
    if text is not None and is_template(text):
        out.attempt(_raise, RuleError("input", "a template ({date}, {period}) names one file per period of a series: "
                                      "a synthetic CSV reads one input (give its path)"))
    header = csv.get("header", True)
    if isinstance(header, tuple):
        missing = [name for name in columns if name not in header]
        if missing:
            out.attempt(_raise, RuleError(
                "csv.header", f"declared column(s) not among the fields it names: {', '.join(missing)[:200]}"
            ))
    if privacy is None or synth is None or out.count():
        return None
    return Spec(
        **_shared_fields(fields, csv, header, base_dir, source, sha256),
        privacy=privacy,
        columns=MappingProxyType(columns),
        statistics=(),
        synth=synth,
    )


def _synth_privacy(priv: Loaded) -> Privacy:
    """A synth spec's budget: zCDP (MST measures with Gaussian noise and charges its selections by the bounded-range
    bound, both in rho), stated as ``rho`` or as ``epsilon`` with ``delta``; a row unit."""
    if isinstance(priv.get("unit", "row"), dict):
        raise RuleError("privacy.unit", "a person unit is not available for synth: one person's K rows would "
                        "multiply every marginal's sensitivity and the selection score's by K (not built in this "
                        "version); use unit: row")
    eps, delta, rho = priv.get("epsilon"), priv.get("delta"), priv.get("rho")
    if rho is None and (eps is None or delta is None):
        raise RuleError("privacy.epsilon" if eps is not None else "privacy.rho",
                        "synth is a zCDP mechanism: give privacy.rho, or epsilon and delta")
    return Privacy("row", priv.get("neighbours", "add_remove"), eps, delta, rho, "zcdp")


def _synth(raw: Loaded, columns: Mapping[str, Column], bad_columns: set[str]) -> Synth:
    if raw["method"] == "aim":
        raise RuleError("synth.method", "aim is not built in this version: use mst")
    shares = raw.get("shares")
    split = (Fraction(1, 3),) * 3 if shares is None else (shares["one_way"], shares["select"], shares["measure"])
    if sum(split) != 1:
        raise RuleError("synth.shares", f"the shares must add up to 1, got {format_exact(sum(split, Fraction(0)))}")
    chosen = []
    for name, body in raw["columns"].items():
        path = f"synth.columns.{name}"
        if name in bad_columns:
            continue  # refused where it is declared
        if name not in columns:
            raise RuleError(path, undeclared(name, columns))
        chosen.append(_synth_column(path, columns[name], body))
    return Synth(raw["method"], tuple(chosen), raw.get("rows"), (split[0], split[1], split[2]),
                 raw.get("max_cells", DEFAULT_SYNTH_MAX_CELLS))


def _synth_column(path: str, column: Column, body: Loaded) -> SynthColumn:
    if column.open:
        raise RuleError(path, f"'{column.name}' is open: a synthetic CSV's values come from the declared domain "
                        "only; declare its categories")
    if not column.numeric:
        for key in ("bins", "values"):
            if key in body:
                raise RuleError(f"{path}.{key}", f"only for a numeric column: a {column.type} column's codes are its "
                                "declared keys")
        return SynthColumn(column.name, None, missing=body.get("missing", "drop"))
    lo, hi = column.bounds or (Fraction(0), Fraction(0))
    if "bins" not in body:
        raise RuleError(f"{path}.bins", f"required for a numeric column, covering its bounds [{format_exact(lo)}, "
                        f"{format_exact(hi)}]: edges, e.g. {{bins: [{format_exact(lo)}, ..., {format_exact(hi + 1)}]}}"
                        f", or a grid {{bins: {{start: {format_exact(lo)}, stop: {format_exact(hi + 1)}, step: S}}}}")
    bins = _bins(f"{path}.bins", body["bins"])
    _covers(f"{path}.bins", column, bins)
    return SynthColumn(column.name, bins, body.get("values", "uniform"), body.get("missing", "drop"))


def _covers(path: str, column: Column, bins: Bins) -> None:
    """Every value of the column's grid within its bounds lies in exactly one bin, and every bin holds one."""
    glo, ghi = column.grid_bounds
    step = column.grid_step
    first, last = bins.edge(0), bins.edge(bins.count)
    if first > glo * step or last <= ghi * step:
        raise RuleError(path, f"the bins [{format_exact(first)}, {format_exact(last)}) must cover the column's "
                        f"bounds [{format_exact(glo * step)}, {format_exact(ghi * step)}]: every value in exactly one "
                        "bin (the last edge above the high bound)")
    if bins.count > MAX_CELLS:  # an edge list this long is over the spec's size limit anyway
        raise RuleError(path, f"{bins.count} bins is over the limit of {MAX_CELLS}")
    if isinstance(bins, GridBins):
        # an even grid: each bin holds a grid point when the step is at least the precision; the first and last
        # hold one because the bins start at or below the low bound and end above the high one
        if bins.step < step:
            raise RuleError(f"{path}.step", f"bins narrower than the column's precision {format_exact(step)}")
        if bins.edge(1) <= glo * step or bins.edge(bins.count - 1) > ghi * step:
            raise RuleError(path, "a bin lies outside the column's bounds: it could never hold a value")
        return
    thresholds = [max(glo, min(ghi + 1, math.ceil(e / step))) for e in bins.edges]
    for j in range(1, len(thresholds)):
        if thresholds[j] <= thresholds[j - 1]:
            raise RuleError(f"{path}[{j}]", f"bin [{format_exact(bins.edge(j - 1))}, {format_exact(bins.edge(j))}) "
                            "holds no value of the column's grid within its bounds")
