"""``dpcli plan``'s output: the plan as a table and notes on a terminal, plain text otherwise, or JSON; the what-if
sections under it; the plan of a randomize spec."""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TextIO

from dpcli.cli.layout import eps, table, writer
from dpcli.core.accounting import format_decimal, format_exact
from dpcli.ledger.base import RENEWING_NOTE
from dpcli.plan.cost import MAX_RELEASE_CELLS, MAX_RELEASE_MEMORY_MB, release_cost
from dpcli.plan.model import Plan
from dpcli.plan.sensitivity import NoiseComponent
from dpcli.plan.what_if import EPSILON_GRID, ErrorRow, TargetAnswer, expected_error, expected_rows
from dpcli.specs.kinds import KINDS, Interval, Value
from dpcli.specs.model import Frequency, Mean
from dpcli.specs.v1 import MAX_RELEASE_EPSILON

if TYPE_CHECKING:
    from dpcli.plan.synth import SynthPlan
    from dpcli.run.prepare import LedgerOutlook  # the commands' layer, loaded by plan --ledger alone
    from dpcli.specs.randomize import RandomizeSpec

# -- the plan --------------------------------------------------------------------------------------------------------


def plan_rows(plan: Plan) -> list[dict[str, Any]]:
    rows = []
    for sp in plan.statistics:
        for c in sp.components:
            unit = "" if c.unit == 1 else f" × {format_exact(c.unit)}"
            parameter = _noise_parameter(sp.statistic.name, c)  # before any use of the component
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
                row.update(
                    rho=format_exact(c.rho), l2_sensitivity_squared=c.l2_squared, variance=format_exact(parameter)
                )
                budget = f"ρ={eps(c.rho)}"
            else:
                row.update(epsilon=format_exact(c.epsilon), scale=format_exact(parameter))
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


def _noise_parameter(name: str, c: NoiseComponent) -> Fraction:
    """A component's noise parameter: a Gaussian's variance, any other's scale (a component is refused without it
    when the plan is made: dpcli.plan.sensitivity.NoiseComponent)."""
    return c.required_variance() if c.mechanism == "discrete_gaussian" else c.required_scale()


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
    rows = []
    for sp in plan.statistics:
        stat = sp.statistic
        if not isinstance(stat, Frequency):
            continue
        # here: its samplers' numpy only for a plan that has a frequency statistic
        from dpcli.mechanisms.randomized_response import CONFIDENCE, error_factor, keep_probability

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


def randomize_plan(spec: RandomizeSpec) -> dict[str, Any]:
    """``dpcli plan`` of a randomize spec: per column its keys, ε share, the probability of keeping the true key, and
    the error of the frequencies estimated from the output."""
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


def synth_plan_doc(plan: SynthPlan) -> dict[str, Any]:
    """``dpcli plan`` of a synth spec: the domain, rho per step, sigma^2 per marginal, the selection's epsilon, and
    how each follows (dpcli.plan.synth)."""
    from dpcli.core.accounting import zcdp_to_epsilon

    synth, delta = plan.synth, plan.spec.privacy.delta
    return {
        "dataset": plan.spec.dataset,
        "synth": {
            "method": synth.method,
            "neighbours": plan.spec.privacy.neighbours,
            "rows": "noisy" if synth.rows is None else synth.rows,
            "rho": format_exact(plan.rho),
            "charge_rho": format_exact(plan.charge.rho),
            "delta": None if delta is None else format_exact(delta),
            "epsilon_at_delta": None if delta is None else format_exact(zcdp_to_epsilon(plan.charge.rho, delta)),
            "domain": [
                {"column": sc.name, "codes": size, "labels": list(labels), "missing": sc.missing,
                 **({"values": sc.values} if sc.bins is not None else {})}
                for sc, size, labels in zip(synth.columns, plan.sizes, plan.labels, strict=True)
            ],
            "candidates": len(plan.candidates),
            "max_cells": synth.max_cells,
            "one_way": {"marginals": len(plan.sizes), "rho_each": format_exact(plan.one_way_rho),
                        "rho": format_exact(plan.rho_one_way), "sigma2": format_exact(plan.one_way_sigma2),
                        "l2_squared": plan.l2_squared},
            "selection": {"draws": plan.rounds, "epsilon_each": format_exact(plan.epsilon_select),
                          "rho": format_exact(plan.rho_select), "score_sensitivity": plan.score_sensitivity,
                          "rate": f"{plan.rate[0]}/{plan.rate[1]}",
                          "accounting": "bounded range: epsilon^2/8 zCDP per draw (Cesar & Rogers 2021)"},
            "pairs": {"marginals": plan.rounds, "rho_each": format_exact(plan.pair_rho),
                      "rho": format_exact(plan.rho_measure), "sigma2": format_exact(plan.pair_sigma2),
                      "l2_squared": plan.l2_squared},
            "derivations": list(plan.derivations),
        },
    }


def synth_plan_text(doc: dict[str, Any]) -> str:
    """``dpcli plan``'s text of a synth spec, from its document."""
    from dpcli.plan.budget import cost_text

    s = doc["synth"]
    rows = "the noisy total" if s["rows"] == "noisy" else f"{s['rows']:,}"
    delta = None if s["delta"] is None else Fraction(s["delta"])
    one, sel, pairs = s["one_way"], s["selection"], s["pairs"]
    lines = [
        f"plan for dataset '{doc['dataset']}': a synthetic CSV by {s['method'].upper()} over {len(s['domain'])} "
        f"columns ({s['neighbours']} neighbours), output rows: {rows}; no data read",
        f"charge: {cost_text(Fraction(0), Fraction(s['charge_rho']), delta, Fraction(0))} of the spec's "
        f"ρ={format_decimal(Fraction(s['rho']), 10)}",
        "domain (codes per column):",
        *(f"  {c['column']}: {c['codes']} codes: {', '.join(label or '(missing)' for label in c['labels'])}"
          for c in s["domain"]),
        "ρ per step:",
        f"  one-way marginals: {one['marginals']} × {format_decimal(Fraction(one['rho_each']), 10)} = "
        f"{format_decimal(Fraction(one['rho']), 10)}, σ²={format_decimal(Fraction(one['sigma2']), 10)} each",
        f"  selection: {sel['draws']} draws × ε_sel²/8, ε_sel={format_decimal(Fraction(sel['epsilon_each']), 12)} "
        f"(Δ_u={sel['score_sensitivity']}, rate {sel['rate']}) = {format_decimal(Fraction(sel['rho']), 10)}",
        f"  measured pairs: {pairs['marginals']} of {s['candidates']} candidates × "
        f"{format_decimal(Fraction(pairs['rho_each']), 10)} = {format_decimal(Fraction(pairs['rho']), 10)}, "
        f"σ²={format_decimal(Fraction(pairs['sigma2']), 10)} each",
        "derivations:",
        *(f"  {line}" for line in s["derivations"]),
    ]
    return "\n".join(lines) + "\n"


def _size(plan: Plan) -> dict[str, int]:
    cost = release_cost(plan)
    return {"cells": cost.cells, "memory_mb_estimate": cost.memory_mb, "max_cells": MAX_RELEASE_CELLS,
            "max_memory_mb": MAX_RELEASE_MEMORY_MB}


def plan_json(plan: Plan, planning: dict[str, Any] | None = None) -> str:
    return json.dumps(plan_doc(plan, planning), indent=2) + "\n"


def plan_doc(plan: Plan, planning: dict[str, Any] | None = None) -> dict[str, Any]:
    """``dpcli plan --json``'s document (without its format and exit code)."""
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
    if any(isinstance(sp.statistic, Mean) for sp in plan.statistics):
        doc["mean_errors"] = mean_errors(plan)
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
    return doc


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
    say = writer(stream)
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
    """What a plan row's ±error is, by its statistic's kind (dpcli/specs/kinds.py)."""
    return KINDS[row["kind"]].interval


def _value(row: dict[str, Any]) -> Value:
    return KINDS[row["kind"]].value


# -- what-if planning (dpcli.plan.what_if) ---------------------------------------------------------------------------


def percent(confidence: Fraction) -> str:
    return f"{format_exact(confidence * 100)}%"


def mean_error_text(plan: Plan) -> list[str]:
    """Each mean's error bound in its units, for the expected rows the spec declares (dpcli.plan.what_if)."""
    out = []
    for mean in mean_errors(plan):
        name, rows, error = mean["statistic"], mean["expected_rows"], mean["error"]
        if rows is None:
            out.append(f"{name}: its error in {mean['column']}'s units needs the rows with a value per cell: give "
                       "`dpcli plan --expected-rows N` (or NAME=N), or expected_rows: in the spec")
            continue
        bound = "more noise than rows: no bound" if error is None else f"±{format_decimal(Fraction(error), 6)}"
        out.append(f"{name}: {bound} in {mean['column']}'s units at {percent(plan.confidence)} for {rows} rows with "
                   "a value per cell (a bound: both parts at their interval's confidence)")
    return out


def mean_errors(plan: Plan) -> list[dict[str, Any]]:
    """Each mean's error bound in its column's units (exact text; None without expected rows, or with more count
    noise than rows), for --json's ``mean_errors`` and the printed plan."""
    out = []
    for sp in plan.statistics:
        if isinstance(sp.statistic, Mean):
            rows = expected_rows(plan, sp)
            error = None if rows is None else expected_error(plan, sp, plan.confidence)
            out.append({"statistic": sp.statistic.name, "column": sp.statistic.column, "expected_rows": rows,
                        "error": None if error is None else format_exact(error)})
    return out


def what_if_json(epsilons: Sequence[Fraction], rows: Sequence[ErrorRow]) -> dict[str, Any]:
    """plan --epsilon's errors (dpcli.plan.what_if.errors_at) at each total epsilon, exact text; None where a mean has
    too few rows."""
    return {"epsilons": [format_exact(e) for e in epsilons], "errors": errors_json(rows)}


def errors_json(rows: Sequence[ErrorRow]) -> list[dict[str, Any]]:
    return [
        {"statistic": row.label, "error": [None if x is None else format_exact(x) for x in row.errors]} for row in rows
    ]


def target_json(answer: TargetAnswer, errors: Sequence[ErrorRow] | None) -> dict[str, Any]:
    """plan --target / target: the smallest total epsilon on the grid meeting every target (dpcli.plan.what_if
    .find_epsilon), and the errors there (None: not met)."""
    doc: dict[str, Any] = {
        "grid": format_exact(EPSILON_GRID),
        "targets": {name: {"error": format_exact(t.error), "confidence": format_exact(t.confidence)}
                    for name, t in answer.targets.items()},
        "epsilon": None if answer.epsilon is None else format_exact(answer.epsilon),
    }
    if errors is not None:
        doc["at_epsilon"] = errors_json(errors)
    return doc


def outlook_json(o: LedgerOutlook) -> dict[str, Any]:
    """plan --ledger: what the release would leave of the dataset's cap (dpcli.run.prepare.ledger_outlook)."""
    return {
        "dataset": o.dataset, "cap": None if o.cap is None else format_exact(o.cap), "spent": format_exact(o.spent),
        "spent_after": None if o.after is None else format_exact(o.after),
        "remaining_after": None if o.left is None else format_exact(o.left), "refused": o.refused,
        **({"per": "period", "period": o.period, "note": RENEWING_NOTE} if o.per_period else {}),
    }


def _decimal(text: str | None) -> str:
    """A what-if figure of the JSON document (exact text) as 6 decimals; '-' for none."""
    return "-" if text is None else format_decimal(Fraction(text), 6)


def print_planning(plan: Plan, planning: dict[str, Any], stream: TextIO) -> None:
    """The what-if sections under a printed plan, from the JSON document `dpcli plan --json` adds them as."""
    say = writer(stream)
    unit = "ε" if plan.rho == 0 else "ε at δ"
    if "what_if" in planning:
        w = planning["what_if"]
        say(f"expected ±error at {percent(plan.confidence)} by total {unit} (the spec's split scaled; "
            "-: a mean with more count noise than rows):")
        table(["statistic", *(f"{unit}={e}" for e in w["epsilons"])],
              [[r["statistic"], *(_decimal(x) for x in r["error"])] for r in w["errors"]], stream)
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
                say(f"{r['statistic']}: ±{_decimal(r['error'][0])} at {percent(plan.confidence)}", indent="    ")
    if "ledger" in planning:
        g = planning["ledger"]
        if g["refused"] is not None:
            say(f"ledger: this release would be refused: {g['refused']}")
        else:
            period = ""
            if g.get("per") == "period":
                period = (f" per period, in period '{g['period']}'" if g["period"] is not None
                          else " per period, in a period not charged yet (--release-id names one)")
            say(f"ledger: dataset '{g['dataset']}' cap ε={g['cap']}{period}, spent ε={_decimal(g['spent'])}; after "
                f"this release spent ε={_decimal(g['spent_after'])}, left ε={_decimal(g['remaining_after'])} "
                "(nothing spent now)")
        if g.get("per") == "period":
            say(f"note: {g['note']}")


def print_series(doc: dict[str, Any], out: TextIO) -> None:
    """A series' part of ``dpcli plan`` (dpcli.run.series.series_plan_doc)."""
    charge = doc["charge"]
    cost = f"ρ={charge['rho']}" if charge["rho"] != "0" else f"ε={charge['epsilon']}"
    method = f" (method {doc['method']})" if doc.get("method") == "factorization" else ""
    if doc.get("charged") == "per_period":
        lines = ["", f"series: {doc['periods']} periods, design {doc['design']}{method}; each period charged {cost} "
                 "to its own period's cap when first released (a cap that renews per declared period: a person "
                 "present in k periods has k·ε)"]
    else:
        lines = ["", f"series: {doc['periods']} periods, design {doc['design']}{method}; charged once, {cost}, when "
                 "the first period is released (later periods spend nothing)"]
    lines += [f"  {line}" for line in doc["derivation"]]
    if doc["errors"]:
        lines.append("  expected errors (± at the spec's confidence): period's own value / running total to date")
        for e in doc["errors"]:
            lines.append(f"    {e['statistic']} at period {e['period']}: ±{e['value']:.6g} / ±{e['to_date']:.6g}")
    lines.append("  rows each run reads (periods in order):")
    for t, periods in doc["reads"].items():
        span = str(periods[0]) if len(periods) == 1 else f"{periods[0]}..{periods[-1]}"
        lines.append(f"    period {t}: period {span}'s rows" if len(periods) == 1 else
                     f"    period {t}: periods {span}'s rows")
        files = (doc.get("files") or {}).get(t)
        if files:  # an input template: the files that run opens
            lines.append(f"      file {files[0]}" if len(files) == 1 else
                         f"      {len(files)} files: {files[0]} .. {files[-1]}")
    out.write("\n".join(lines) + "\n")
