"""Human-facing output: rich tables on a terminal, plain text otherwise. The only module besides cli that knows rich.

Results go to stdout; summaries, warnings and errors to stderr. No colour when the stream is not a terminal, when
NO_COLOR is set, or with --quiet (then only errors are printed).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any, TextIO

from dpcli.core.accounting import format_decimal, format_exact
from dpcli.ledger import BudgetStatus, Record
from dpcli.plan.model import MAX_RELEASE_CELLS, MAX_RELEASE_MEMORY_MB, Plan, release_cost
from dpcli.spec.fields import MAX_RELEASE_EPSILON
from dpcli.spec.kinds import KINDS, Interval, Value
from dpcli.spec.model import Frequency, Mean


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fancy(stream: TextIO) -> bool:
    return _is_tty(stream) and not os.environ.get("NO_COLOR")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], stream: TextIO, title: str | None = None) -> None:
    """A table: rich on a terminal, aligned plain text otherwise (a pipe keeps one line per row, for grep and cut).

    On a terminal no word is ever broken: each column is at least as wide as its longest word, and a table that
    cannot fit the terminal that way is printed as one block per row instead (see ``_blocks``)."""
    if _fancy(stream):
        from rich import box
        from rich.console import Console
        from rich.table import Table

        console = Console(file=stream, highlight=False)
        widest = [max(len(word) for cell in (h, *(r[i] for r in rows)) for word in cell.split() or [""])
                  for i, h in enumerate(headers)]
        gap = 2  # the SIMPLE_HEAD box without edges: two spaces between columns
        if sum(widest) + gap * (len(headers) - 1) > console.width:
            _blocks(headers, rows, stream, title, console.width)
            return
        t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        for h, w in zip(headers, widest, strict=True):
            t.add_column(h, min_width=w, overflow="fold")
        for r in rows:
            t.add_row(*r)
        console.print(t)
        return
    if title:
        stream.write(title + "\n")
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    stream.write("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for r in rows:
        stream.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _blocks(headers: Sequence[str], rows: Sequence[Sequence[str]], stream: TextIO, title: str | None,
            width: int) -> None:
    """A table too wide for the terminal: per row its first cell, then ``header: value`` pairs wrapped at spaces."""
    import textwrap

    if title:
        stream.write(title + "\n")
    for r in rows:
        stream.write(f"{r[0]}\n")
        pairs = "; ".join(f"{h}: {c}" for h, c in zip(headers[1:], r[1:], strict=True) if c)
        for line in textwrap.wrap(pairs, width - 2, break_long_words=False, break_on_hyphens=False):
            stream.write(f"  {line}\n")


def _writer(stream: TextIO) -> Any:
    """A function writing one line of prose: on a terminal wrapped at its width between words (``indent`` starts
    each continuation line), elsewhere as it is."""
    width = None
    if _fancy(stream):
        from rich.console import Console

        width = Console(file=stream).width

    def say(text: str, indent: str = "  ") -> None:
        if width is None or len(text) <= width:
            stream.write(text + "\n")
            return
        import textwrap

        # the first line keeps its own leading spaces (textwrap drops whitespace only inside the paragraph)
        for line in textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                                  break_on_hyphens=False):
            stream.write(line + "\n")

    return say


def eps(x: Fraction | None) -> str:
    if x is None:
        return "-"
    exact = format_exact(x)
    return exact if len(exact) <= 20 else format_decimal(x, 10)


# -- plan --------------------------------------------------------------------------------------------------------


def plan_rows(plan: Plan) -> list[dict[str, Any]]:
    rows = []
    for sp in plan.statistics:
        for c in sp.components:
            unit = "" if c.unit == 1 else f" × {format_exact(c.unit)}"
            half = c.halfwidth(float(plan.confidence))
            row: dict[str, Any] = {
                "statistic": sp.statistic.name,
                "kind": sp.statistic.kind,
                "part": c.role,
                "cells": sp.cells,
                "mechanism": c.mechanism,
                "sensitivity": c.sensitivity,
                "sensitivity_unit": format_exact(c.unit),
                "derivation": c.derivation,
            }
            if c.mechanism == "discrete_gaussian":
                assert c.variance is not None
                row.update(
                    rho=format_exact(c.rho), l2_sensitivity_squared=c.l2_squared, variance=format_exact(c.variance)
                )
                budget = f"ρ={eps(c.rho)}"
            else:
                assert c.scale is not None
                row.update(epsilon=format_exact(c.epsilon), scale=format_exact(c.scale))
                budget = eps(c.epsilon) if plan.rho == 0 else f"ε={eps(c.epsilon)}"
                if c.mechanism == "exponential" and c.draws:  # top_k: k draws of epsilon each
                    row.update(draws=c.draws, choices=c.choices)
                    budget = f"{c.draws}×{budget}" if c.draws > 1 else budget
            error95 = half if plan.confidence == Fraction(95, 100) else c.halfwidth(0.95)
            row.update(error95=format_exact(error95 * c.unit), error=format_exact(half * c.unit),
                       _param=f"{c.parameter_text}{unit}", _budget=budget)
            if sp.bounding is not None:
                b = sp.bounding
                row["bounding"] = {
                    "max_rows": b.max_rows, "max_groups": b.groups, "max_rows_per_group": b.rows_per_group,
                    "cells_reached": b.reach, "rows_per_cell": b.per_cell, "rows_reached": b.rows,
                }
            if sp.selection is not None:
                sel = sp.selection
                row["selection"] = {
                    "dimension": sp.statistic.dimensions[sel.dimension], "threshold": sel.threshold,
                    "delta": format_exact(sel.delta), "max_length": sel.max_length, "keys_per_person": sel.keys,
                    "count_per_key": sel.per_key, "derivation": sel.derivation,
                }
            rows.append(row)
    return rows


def _unit_text(plan: Plan) -> str:
    person = plan.spec.privacy.person
    if person is None:
        return "one person = one row"
    return f"one person = the rows sharing a {person.id}, at most {person.max_rows} kept"


def bounding_text(plan: Plan) -> list[str]:
    """What one person may contribute (a person-level unit): per statistic K, G and R as the plan bounds it, and
    what a missing id means."""
    person = plan.spec.privacy.person
    if person is None:
        return []
    lines = [
        f"contribution bounding: a person is the rows sharing a {person.id}; the rows kept are chosen by a keyed "
        "pseudo-random function of the id and the row's own cells under a secret drawn per release (never by file "
        "order or value); "
        + ("rows with a missing id are left out" if person.missing_id == "drop"
           else "a row with a missing id is a person of its own"),
    ]
    for sp in plan.statistics:
        b = sp.bounding
        if b is None:
            continue
        text = f"  {sp.statistic.name} ({b.text()}): one person reaches at most {b.rows} of its rows"
        if sp.statistic.dimensions:
            text += f", in at most g={b.reach} cell(s), r={b.per_cell} in each"
        lines.append(text)
    return lines


def selection_text(plan: Plan) -> list[str]:
    """Per open-key statistic, the partition selection's threshold and what it costs."""
    lines = []
    for sp in plan.statistics:
        sel = sp.selection
        if sel is None:
            continue
        dim = sp.statistic.dimensions[sel.dimension]
        lines.append(
            f"  {sp.statistic.name}: keys are released when their noisy count >= {sel.threshold}; a key no other "
            f"person holds is released with probability at most δ={format_decimal(sel.delta, 6)} (the selection's "
            f"δ); keys of {dim} are cut to {sel.max_length} characters; the released value is that same noisy count"
        )
        lines.append(f"    why: {sel.derivation}")
    return lines


def frequency_rows(plan: Plan) -> list[dict[str, Any]]:
    """Per ``kind: frequency`` statistic: the randomization it reads and its estimate's error, from public numbers
    (k, ε) and the randomized file's row count n, which the plan does not know: the half-width is a factor × √n."""
    from dpcli.mechanisms.randomized_response import CONFIDENCE, error_factor, keep_probability

    rows = []
    for sp in plan.statistics:
        stat = sp.statistic
        if not isinstance(stat, Frequency):
            continue
        epsilon = stat.randomized_epsilon
        rows.append({
            "statistic": stat.name, "kind": stat.kind, "column": stat.column, "cells": sp.cells,
            "randomized_epsilon": format_exact(epsilon), "keep_probability": keep_probability(sp.cells, float(epsilon)),
            "error95_per_sqrt_rows": error_factor(sp.cells, epsilon), "confidence": CONFIDENCE,
        })
    return rows


def frequency_text(plan: Plan) -> list[str]:
    return [
        f"  {r['statistic']}: {r['cells']} keys of {r['column']} randomized at ε={r['randomized_epsilon']} (the true "
        f"key kept with probability {r['keep_probability']:.4g}); no sensitivity and no noise here: the estimates "
        f"are post-processing of a published file, ((e^ε + k − 1)·c − n)/(e^ε − 1) per key, unbiased, "
        f"±{r['error95_per_sqrt_rows']:.4g}·√n at 95% for a file of n rows (Hoeffding)"
        for r in frequency_rows(plan)
    ]


def randomize_plan(spec: Any) -> dict[str, Any]:
    """``dpcli plan`` of a randomize spec (a dpcli.spec.randomize.RandomizeSpec): per column its keys, ε share, the
    probability of keeping the true key, and the error of the frequencies estimated from the output."""
    from dpcli.mechanisms.randomized_response import error_factor, keep_probability

    share = spec.column_epsilon
    return {
        "dataset": spec.dataset, "command": "randomize", "neighbours": spec.neighbours,
        "epsilon_per_record": format_exact(spec.epsilon),
        "columns": [
            {"column": c.name, "keys": len(c.keys), "epsilon": format_exact(share),
             "keep_probability": keep_probability(len(c.keys), float(share)),
             "frequency_error95_per_sqrt_rows": error_factor(len(c.keys), share)}
            for c in spec.columns
        ],
    }


def randomize_plan_text(plan: dict[str, Any]) -> str:
    lines = [
        f"plan for dataset '{plan['dataset']}': randomize, ε={plan['epsilon_per_record']} per record, split evenly "
        f"over {len(plan['columns'])} column(s) ({plan['neighbours']} neighbours: one row per input row is "
        "published); no data read",
        "each cell is published as its true key with probability e^ε/(e^ε+k−1), else as one of the k−1 others "
        "uniformly; a missing cell as a uniform key (exact sampling)",
    ]
    lines += [
        f"  {c['column']}: k={c['keys']} keys, ε={c['epsilon']}, true key kept with probability "
        f"{c['keep_probability']:.4g}; a frequency estimated from the output: "
        f"±{c['frequency_error95_per_sqrt_rows']:.4g}·√n at 95% for n rows"
        for c in plan["columns"]
    ]
    return "\n".join(lines) + "\n"


def _size(plan: Plan) -> dict[str, int]:
    cost = release_cost(plan)
    return {"cells": cost.cells, "memory_mb_estimate": cost.memory_mb, "max_cells": MAX_RELEASE_CELLS,
            "max_memory_mb": MAX_RELEASE_MEMORY_MB}


def plan_json(plan: Plan, planning: dict[str, Any] | None = None) -> str:
    spec = plan.spec
    at = plan.epsilon_at_delta
    doc: dict[str, Any] = {
        "dataset": spec.dataset,
        "neighbours": spec.privacy.neighbours,
        "accounting": spec.privacy.accounting,
        "epsilon": format_exact(plan.epsilon),
        "rho": format_exact(plan.rho),
        "delta": None if plan.delta is None else format_exact(plan.delta),
        "epsilon_at_delta": None if at is None else format_exact(at),
        "confidence": format_exact(plan.confidence),
        "size": _size(plan),
        "statistics": [{k: v for k, v in r.items() if not k.startswith("_")} for r in plan_rows(plan)],
    }
    if any(isinstance(sp.statistic, Frequency) for sp in plan.statistics):
        doc["frequencies"] = frequency_rows(plan)
    if plan.spec.postprocess:
        from dpcli.postprocess.consistency import plan_notes

        doc["postprocess"] = {
            sp.statistic.name: note for sp, note in zip(plan.statistics, plan_notes(plan), strict=True) if note
        }
    person = spec.privacy.person
    if person is not None:
        doc["person"] = {
            "id": person.id, "max_rows": person.max_rows, "max_groups": person.max_groups,
            "max_rows_per_group": person.max_rows_per_group, "missing_id": person.missing_id,
        }
    doc.update(planning or {})  # dpcli plan --epsilon / --target / --ledger (planning_json)
    return json.dumps(doc, indent=2) + "\n"


def postprocess_text(plan: Plan) -> list[str]:
    """The plan's lines on each statistic's `postprocess:` (dpcli.postprocess.consistency.plan_notes); none without
    one."""
    if not plan.spec.postprocess:
        return []
    from dpcli.postprocess.consistency import (
        plan_notes,  # numpy and scipy's users: only for a spec that declares post-processing
    )

    notes = [(sp.statistic.name, note) for sp, note in zip(plan.statistics, plan_notes(plan), strict=True) if note]
    return ["post-processing (reads the noisy values only: spends nothing):"] + [f"  {n}: {t}" for n, t in notes]


def print_plan(plan: Plan, stream: TextIO) -> None:
    spec = plan.spec
    rows = plan_rows(plan)
    say = _writer(stream)
    say(
        f"plan for dataset '{spec.dataset}': {plan.cost_text()} ({spec.privacy.neighbours} neighbours, "
        f"{_unit_text(plan)}); no data read"
    )
    if rows:  # a release of frequency statistics only has no noise to show
        table(
            ["statistic", "part", "cells", "mechanism", "sensitivity", "ε" if plan.rho == 0 else "budget", "noise",
             f"±error {percent(plan.confidence)}"],
            [
                [
                    r["statistic"],
                    r["part"],
                    str(r["cells"]),
                    r["mechanism"],
                    str(r["sensitivity"]) + ("" if r["sensitivity_unit"] == "1" else f" × {r['sensitivity_unit']}"),
                    r["_budget"],
                    r["_param"],
                    format_decimal(Fraction(r["error"]), 6)
                    + (" rank" if _interval(r) is Interval.RANK and r["mechanism"] == "exponential" else ""),
                ]
                for r in rows
            ],
            stream,
        )
    say(f"size: {release_cost(plan).text()} (limits {MAX_RELEASE_CELLS} cells, {MAX_RELEASE_MEMORY_MB} MB)")
    for line in bounding_text(plan):
        say(line, indent="    ")
    if any(_interval(r) is Interval.RANK for r in rows):  # a quantile's ±error is a rank bound
        say(
            f"a quantile's ±error is a rank bound: with {percent(plan.confidence)} probability the released value's "
            "rank error (rows off the q split) exceeds the best candidate's by at most that many rows; its table rows "
            "have no interval "
            "unless it declares interval: {share: S} (its 'interval' parts: ci_low/ci_high in value units)",
            indent="    ",
        )
    if rows:
        say("why each sensitivity:")
    for r in rows:
        say(f"  {r['statistic']} ({r['part']}): {r['derivation']}", indent="    ")
    selection = selection_text(plan)
    if selection:
        say("open keys (private partition selection: only keys whose noisy count passes the threshold appear):")
        for line in selection:
            say(line, indent="    ")
    frequency = frequency_text(plan)
    if frequency:
        say("frequency estimates from a randomized file (nothing spent; `dpcli randomize` paid for the file):")
        for line in frequency:
            say(line, indent="    ")
    for line in postprocess_text(plan):
        say(line, indent="    ")
    if any(_value(r) is Value.MEAN for r in rows):
        say("a mean's error is about (sum error + |mean| × count error) / n for n rows with a value")
        for line in mean_error_text(plan):
            say(line, indent="    ")
    if any(_interval(r) is Interval.GAP for r in rows):
        say(f"a top_k's or mode's ±error is a count gap: with {percent(plan.confidence)} probability each chosen key's "
            "count is within it of the largest count among the keys not chosen before it (noise: the exponential "
            "mechanism's temperature)")
    if any(_value(r) in (Value.VARIANCE, Value.STD) for r in rows):
        say(
            "a variance's error is about (squares error + 2 |mean - centre| × sum error + variance × count error) / n "
            "for n rows with a value, a std's that / (2 std); their intervals take each part at 98.33% (union bound)"
        )


def _interval(row: dict[str, Any]) -> Interval:
    """What a plan row's ±error is, by its statistic's kind (dpcli/spec/kinds.py)."""
    return KINDS[row["kind"]].interval


def _value(row: dict[str, Any]) -> Value:
    return KINDS[row["kind"]].value


# -- what-if planning (dpcli.plan.what_if) ---------------------------------------------------------------------------


def percent(confidence: Fraction) -> str:
    return f"{format_exact(confidence * 100)}%"


def mean_error_text(plan: Plan) -> list[str]:
    """Each mean's error bound in its units, for the expected rows the spec declares (dpcli.plan.what_if)."""
    from dpcli.plan.what_if import expected_error, expected_rows

    out = []
    for sp in plan.statistics:
        rows = expected_rows(plan, sp) if isinstance(sp.statistic, Mean) else None
        if rows is not None:
            error = expected_error(plan, sp, plan.confidence)
            bound = "more noise than rows: no bound" if error is None else f"±{format_decimal(error, 6)}"
            out.append(f"{sp.statistic.name}: {bound} at {percent(plan.confidence)} for {rows} rows with a value "
                       "per cell (a bound: both parts at their interval's confidence)")
    return out


def _error_cells(plan: Plan) -> list[tuple[str, Any]]:
    """(label, how to get the error from a plan at another budget): a statistic's one figure where it has one, else
    each noise component's half-width (a quantile's in rank rows)."""
    from dpcli.plan.what_if import expected_error, expected_rows

    out: list[tuple[str, Any]] = []
    for i, sp in enumerate(plan.statistics):
        one_figure = not isinstance(sp.statistic, Mean) or expected_rows(plan, sp) is not None  # a mean: with rows
        if KINDS[sp.statistic.kind].target and one_figure:
            out.append((sp.statistic.name, lambda p, i=i: expected_error(p, p.statistics[i], p.confidence)))
            continue
        for j, c in enumerate(sp.components):
            out.append((f"{sp.statistic.name} ({c.role})", lambda p, i=i, j=j: (
                p.statistics[i].components[j].halfwidth(float(p.confidence)) * p.statistics[i].components[j].unit
            )))
    return out


def what_if(plan: Plan, epsilons: Sequence[Fraction]) -> dict[str, Any]:
    """Errors at each total epsilon (plan --epsilon), exact text; None where a mean has too few rows."""
    from dpcli.plan.what_if import plan_at

    plans = [plan_at(plan, e) for e in epsilons]
    return {
        "epsilons": [format_exact(e) for e in epsilons],
        "errors": [
            {"statistic": label, "error": [None if (x := get(p)) is None else format_exact(x) for p in plans]}
            for label, get in _error_cells(plan)
        ],
    }


def target_answer(plan: Plan, extra: dict[str, Fraction]) -> dict[str, Any]:
    """plan --target / target: the smallest total epsilon on the grid meeting every target, and the errors there."""
    from dpcli.plan.what_if import EPSILON_GRID, find_epsilon, targets_of

    answer = find_epsilon(plan, targets_of(plan, extra))
    doc: dict[str, Any] = {
        "grid": format_exact(EPSILON_GRID),
        "targets": {name: {"error": format_exact(t.error), "confidence": format_exact(t.confidence)}
                    for name, t in answer.targets.items()},
        "epsilon": None if answer.epsilon is None else format_exact(answer.epsilon),
    }
    if answer.plan is not None:
        doc["at_epsilon"] = what_if(plan, [answer.epsilon])["errors"]  # type: ignore[list-item]
    return doc


def ledger_answer(plan: Plan, location: Any, lock_timeout: float | None = None) -> dict[str, Any]:
    from dpcli.run.prepare import ledger_outlook

    o = ledger_outlook(plan, location, lock_timeout)
    return {
        "dataset": o.dataset, "cap": None if o.cap is None else format_exact(o.cap), "spent": format_exact(o.spent),
        "spent_after": None if o.after is None else format_exact(o.after),
        "remaining_after": None if o.left is None else format_exact(o.left), "refused": o.refused,
    }


def print_planning(plan: Plan, planning: dict[str, Any], stream: TextIO) -> None:
    """The what-if sections under a printed plan."""
    say = _writer(stream)
    num = lambda x: "-" if x is None else format_decimal(Fraction(x), 6)  # noqa: E731
    unit = "ε" if plan.rho == 0 else "ε at δ"
    if "what_if" in planning:
        w = planning["what_if"]
        say(f"expected ±error at {percent(plan.confidence)} by total {unit} (the spec's split scaled; "
            "-: a mean with more count noise than rows):")
        table(["statistic", *(f"{unit}={e}" for e in w["epsilons"])],
              [[r["statistic"], *(num(x) for x in r["error"])] for r in w["errors"]], stream)
    if "target" in planning:
        t = planning["target"]
        wanted = ", ".join(
            f"{n} ±{v['error']} at {percent(Fraction(v['confidence']))}" for n, v in t["targets"].items()
        )
        if t["epsilon"] is None:
            say(f"targets ({wanted}): not met at any {unit} up to {format_exact(MAX_RELEASE_EPSILON)}")
        else:
            say(f"targets ({wanted}): smallest total {unit}={t['epsilon']} (rounded up to a multiple of {t['grid']});"
                " errors there:")
            for r in t["at_epsilon"]:
                say(f"{r['statistic']}: ±{num(r['error'][0])} at {percent(plan.confidence)}", indent="    ")
    if "ledger" in planning:
        g = planning["ledger"]
        if g["refused"] is not None:
            say(f"ledger: this release would be refused: {g['refused']}")
        else:
            say(f"ledger: dataset '{g['dataset']}' cap ε={g['cap']}, spent ε={num(g['spent'])}; after this release "
                f"spent ε={num(g['spent_after'])}, left ε={num(g['remaining_after'])} (nothing spent now)")


# -- budget and ledger -------------------------------------------------------------------------------------------


def budget_json(statuses: dict[str, BudgetStatus]) -> str:
    doc = [
        {
            "dataset": s.dataset,
            "cap": None if s.cap is None else format_exact(s.cap),
            "spent": format_exact(s.spent),
            "remaining": None if s.remaining is None else format_exact(s.remaining),
            "releases": s.releases,
            "cap_delta": format_exact(s.cap_delta),
            "spent_delta": format_exact(s.delta_spent),  # partition selections' delta (open keys)
            "spent_pure_epsilon": format_exact(s.pure),
            "spent_rho": format_exact(s.rho),
            "unit": s.unit,
            "neighbours": s.neighbours,
        }
        for s in statuses.values()
    ]
    return json.dumps(doc, indent=2) + "\n"


def print_budget(statuses: dict[str, BudgetStatus], stream: TextIO) -> None:
    if not statuses:
        stream.write("no datasets in this ledger yet (set a cap with `dpcli budget set DATASET --epsilon E`)\n")
        return
    selections = any(s.delta_spent for s in statuses.values())  # the column shows only where open keys spent δ
    table(
        ["dataset", "neighbours", "cap ε", "cap δ", "spent ε", "remaining ε", "releases", "of which zCDP ρ"]
        + (["spent δ"] if selections else []),
        [
            [
                s.dataset, s.neighbours or "(not pinned)", eps(s.cap), eps(s.cap_delta), eps(s.spent), eps(s.remaining),
                str(s.releases), eps(s.rho),
            ] + ([eps(s.delta_spent)] if selections else [])
            for s in statuses.values()
        ],
        stream,
    )
    if selections:
        stream.write("spent δ: partition selections (open keys), taken off the cap's δ\n")
    if any(s.rho for s in statuses.values()):
        stream.write("spent ε includes zCDP spends converted at the cap's δ (Canonne, Kamath & Steinke 2020)\n")


def ledger_json(records: list[Record]) -> str:
    return json.dumps([r.as_dict() for r in records], indent=2) + "\n"


def print_ledger(records: list[Record], stream: TextIO) -> None:
    if not records:
        stream.write("the ledger is empty\n")
        return
    rows = []
    for r in records:
        if r.type == "cap":
            what = f"cap ε={r.get('epsilon')}" + (" (raised)" if r.get("raise") else "")
        elif r.type == "spend":
            rid = f" [release id {r.get('release_id')}]" if r.get("release_key") else ""
            what = f"spend ε={r.get('epsilon')}{rid}: {', '.join(r.get('statistics') or [])}"
        else:
            what = f"released {str(r.get('release_id'))[:40]}, table sha256 {str(r.get('table_sha256'))[:12]}"
        rows.append([str(r.seq), str(r.get("time", "")), str(r.get("dataset", "")), r.type, what, r.hash[:12]])
    table(["seq", "time", "dataset", "type", "what", "hash"], rows, stream)


# -- messages ----------------------------------------------------------------------------------------------------

# What a stream whose encoding lacks a character writes instead (PYTHONIOENCODING=ascii, or LC_ALL=C with
# PYTHONUTF8=0, made `dpcli plan` and `budget show` exit 1 on their ε): the symbols dpcli prints spelled in ASCII,
# anything else as a backslash escape. Only text streams change: tables go to stdout as UTF-8 bytes (output.py).
_ASCII_SPELLING = {
    "ε": "eps", "ρ": "rho", "δ": "delta", "σ": "sigma", "Δ": "Delta", "≤": "<=", "≥": ">=", "±": "+/-", "≈": "~",
    "×": "x", "√": "sqrt", "²": "^2", "₂": "2", "…": "...", "−": "-", "→": "->",
}
STREAM_ERRORS = "dpcli.ascii"


def _spell_in_ascii(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(_ASCII_SPELLING.get(c) or c.encode("ascii", "backslashreplace").decode() for c in text), exc.end


def setup_streams() -> None:
    """Let stdout and stderr write any text, whatever their encoding (see _ASCII_SPELLING). Called once by the CLI."""
    import codecs

    codecs.register_error(STREAM_ERRORS, _spell_in_ascii)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # closed, or not a TextIOWrapper underneath
                reconfigure(errors=STREAM_ERRORS)


# Set by the CLI when the command line has --json: errors are then one JSON object on stderr (docs/exit-codes.md).
json_errors = False


def error(message: str, kind: str = "internal", code: int = 1) -> None:
    """One error line on stderr, ``dpcli: error: MESSAGE``; with --json one object,
    ``{"error": {"code": CODE, "kind": KIND, "message": MESSAGE}}`` (the same message, without the prefix)."""
    if json_errors:
        doc = {"error": {"code": code, "kind": kind, "message": message}}
        sys.stderr.write(json.dumps(doc, ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(f"dpcli: error: {message}\n")


def warning(message: str) -> None:
    """One ``dpcli: warning:`` line on stderr (printed even with --quiet: it points at a budget at risk)."""
    sys.stderr.write(f"dpcli: warning: {message}\n")


def info(message: str) -> None:
    """A summary or notice on stderr (the CLI leaves it out under --quiet)."""
    sys.stderr.write(message + "\n")


# -- input progress ----------------------------------------------------------------------------------------------


def progress_wanted(stream: TextIO, *, quiet: bool, as_json: bool) -> bool:
    """Whether a person is watching ``stream`` and asked for no silence: a terminal, not ``--quiet`` or ``--json``
    (a script reads that stream), not CI (``$CI`` set to anything: a CI log that records a terminal keeps every
    frame), not ``TERM=dumb`` (no cursor movement) and not ``NO_COLOR`` (the contract: no bar then either)."""
    env = os.environ
    return not quiet and not as_json and _fancy(stream) and not env.get("CI") and env.get("TERM") != "dumb"


class InputBar:
    """The bar of bytes read while the input is read: ``on_bytes(read, total)`` is the callback the library calls
    (``total`` None for a stream: bytes read, no total); ``close()`` takes the bar off the terminal.

    It shows the bytes read, the total and their ratio, nothing else: the input's size is public (threat model),
    while a rate, an ETA or an elapsed time would print how long the scan took so far, a per-phase time that
    depends on the data (the parser's speed varies with the cells: quoted fields, long lines, bad numbers). The
    bar's movement shows that to someone watching the terminal, but no figure of it can be copied into a log.
    No row count and no cell ever reach it: the library reports bytes only.

    Transient: it erases itself when ``read`` reaches ``total`` (release() ends its reports with one where they are
    equal) and at ``close()``, so what follows starts on a clean line: the summary, the one ``dpcli: error:`` line,
    or a table written to standard output on the same terminal (which would otherwise start on the bar's line).
    Lines written to stderr meanwhile (``--verbose``) are printed above it by rich."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._progress: Any = None
        self._task: Any = None
        self._done = False

    def on_bytes(self, read: int, total: int | None) -> None:
        if self._done:
            return
        if total is not None and read >= total:
            self.close()
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TaskProgressColumn, TextColumn

            self._progress = Progress(
                TextColumn("reading input"), BarColumn(), TaskProgressColumn(), DownloadColumn(),
                console=Console(file=self._stream, highlight=False), transient=True,
                redirect_stdout=False,  # stdout is the table: never through rich
            )
            self._task = self._progress.add_task("input", total=total, completed=read)
            self._progress.start()  # drawn now, not at the first refresh tick
        else:
            self._progress.update(self._task, completed=read, total=total)

    def close(self) -> None:
        self._done = True
        progress, self._progress = self._progress, None
        if progress is not None:
            progress.stop()


@contextlib.contextmanager
def input_bar(stream: TextIO, wanted: bool) -> Iterator[Callable[[int, int | None], None] | None]:
    """``with input_bar(sys.stderr, wanted) as on_bytes:`` the callback for ``release(on_input_bytes=...)`` (None
    when not ``wanted``); the bar is off the terminal when the block ends, however it ends (an error, a signal)."""
    if not wanted:
        yield None
        return
    # the bar draws on its own copy of the terminal's descriptor: while the input is read, the engine points fd 2 at
    # /dev/null (a Rust panic's text could quote a cell: dpcli.engine.lines.reading), which would hide the bar too
    try:
        terminal: TextIO = os.fdopen(os.dup(stream.fileno()), "w", encoding=stream.encoding or "utf-8",
                                     errors="replace")
    except (OSError, ValueError, AttributeError):
        yield None  # no descriptor to copy (a stream without one): no bar
        return
    bar = InputBar(terminal)
    try:
        yield bar.on_bytes
    finally:
        bar.close()
        terminal.close()


# -- audit -------------------------------------------------------------------------------------------------------


def print_audit(report: Any, stream: TextIO) -> None:
    """A dpcli.audit.release_audit.AuditReport as a table, the neighbours, the notes and the verdict."""
    stream.write(
        f"audit of dataset '{report.dataset}' ({report.neighbours} neighbours, {report.accounting}): "
        f"{report.trials} trials per statistic and dataset, every bound at joint confidence {report.confidence}; "
        "synthetic data only: no input read, nothing spent\n"
    )
    table(
        ["statistic", "kind", "mechanism", "claimed ε", "δ", "ε lower bound", "events", "result"],
        [
            [
                s.statistic,
                s.kind,
                s.mechanism,
                format_decimal(s.claimed_epsilon, 6),
                format_decimal(s.delta, 6),
                f"{s.epsilon_lower_bound:.4f}",
                str(len(s.events)),
                "within claim" if s.within_claim else "VIOLATION",
            ]
            for s in report.statistics
        ],
        stream,
    )
    stream.write("neighbouring datasets:\n")
    for s in report.statistics:
        stream.write(f"  {s.statistic}: {s.neighbour}\n")
        if s.worst_event:
            stream.write(f"    strongest event: {s.worst_event}\n")
    for note in report.notes:
        stream.write(f"note: {note}\n")
    verdict = "every statistic is within its claim" if report.ok else "VIOLATION: a claim is provably not met"
    stream.write(f"result: {verdict}\n")
