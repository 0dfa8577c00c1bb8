"""``dpcli synth --report``: one self-contained HTML page about a synthetic release, made from published values only.

Every figure compares the synthetic file with the noisy measurements it was fitted to (both published), beside the
error the noise alone would give: a fit to the measurements, never a comparison with the real data (which would
be a release of its own, unpaid). Every text is HTML-escaped; there is no script.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpcli.publish.synth_output import Measured, code_labels
from dpcli.specs.model import Spec

__all__ = ["expected_noise_tv", "fit_tv", "render_synth_report"]

Z95 = 1.959963984540054  # the two-sided 95% quantile of the normal law (the noise is discrete Gaussian, near it)


def fit_tv(measured: np.ndarray, synthetic: np.ndarray) -> float:
    """Total-variation distance between the synthetic file's distribution over a marginal's cells and the noisy
    measurement's (negative noisy counts taken as 0, both normalised): 0 when the file matches the measurement."""
    m = np.clip(measured.astype(float), 0, None)
    s = synthetic.astype(float)
    if m.sum() <= 0 or s.sum() <= 0:
        return 1.0 if m.sum() != s.sum() else 0.0
    return float(0.5 * np.abs(m / m.sum() - s / s.sum()).sum())


def expected_noise_tv(sigma2: float, cells: int, total: float) -> float:
    """What the noise alone puts between a measurement and the truth, as a total-variation distance: the cells'
    expected |noise| (σ·√(2/π) each, the normal approximation of the discrete Gaussian) over twice the total."""
    if total <= 0:
        return 1.0
    return min(1.0, cells * math.sqrt(sigma2) * math.sqrt(2 / math.pi) / (2 * total))


def render_synth_report(spec: Spec, meta: dict[str, Any], measured: Sequence[Measured],
                        fitted: Sequence[np.ndarray]) -> str:
    """The page: what was released and at what cost, then per measured marginal its fit and the noise's size."""
    e = html.escape
    synth = spec.synth
    if synth is None:
        raise ValueError("a synth report needs a spec with synth:")
    names = [sc.name for sc in synth.columns]
    total = float(np.mean([max(int(m.counts.sum()), 0) for m in measured if len(m.columns) == 1]))
    out = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Synthetic data: {e(spec.dataset)} ({e(str(meta.get('release_id')))})</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.2em .5em;"
        "text-align:right}th{background:#eee}td.k{text-align:left}</style></head><body>",
        f"<h1>Synthetic data: {e(spec.dataset)}</h1>",
        f"<p>Release <code>{e(str(meta.get('release_id')))}</code>, method {e(synth.method.upper())}, "
        f"ρ = {e(str(meta.get('rho')))} (zCDP, {e(spec.privacy.neighbours)} neighbours), "
        f"{e(str(meta['rows']['published']))} rows ({e(meta['rows']['from'])}).</p>",
        "<p><strong>Every figure below is a fit to the published measurements</strong>: the synthetic file "
        "compared with the noisy marginals it was estimated from (both public), beside the distance the noise alone "
        "puts between a measurement and the truth. The real data is compared with nothing here.</p>",
        "<h2>Budget</h2><table><tr><th>step</th><th>ρ</th><th>what</th></tr>",
    ]
    for step in meta["steps"]:
        what = (f"σ² = {step['sigma2']} per marginal" if "sigma2" in step else
                f"{step['rounds']} exponential-mechanism draws at ε = {step['epsilon_per_round']} each "
                f"(score sensitivity {step['score_sensitivity']}; bounded range, ε²/8 each)")
        out.append(f"<tr><td class=k>{e(step['step'])}</td><td>{e(str(step['rho']))}</td><td class=k>{e(what)}</td>"
                   "</tr>")
    out.append("</table>")
    sel = meta["steps"][1]["selected"]
    out.append("<h2>The tree</h2><p>Pairs selected (in order): "
               + ", ".join(f"{e(a)} × {e(b)}" for a, b in sel) + "</p>")
    out.append("<h2>Fit to each measured marginal</h2><table><tr><th>marginal</th><th>cells</th>"
               "<th>TV(synthetic, measurement)</th><th>expected TV of the noise alone</th></tr>")
    for m, f in zip(measured, fitted, strict=True):
        label = " × ".join(names[i] for i in m.columns)
        noise = expected_noise_tv(float(m.sigma2), len(m.counts), total)
        out.append(f"<tr><td class=k>{e(label)}</td><td>{len(m.counts)}</td><td>{fit_tv(m.counts, f):.4f}</td>"
                   f"<td>{noise:.4f}</td></tr>")
    out.append("</table>")
    out.append("<h2>One-way marginals</h2>")
    for m, f in zip(measured, fitted, strict=True):
        if len(m.columns) != 1:
            continue
        sc = synth.columns[m.columns[0]]
        labels = code_labels(spec.columns[sc.name], sc)
        half = Z95 * math.sqrt(float(m.sigma2))
        out.append(f"<h3>{e(sc.name)}</h3><table><tr><th>value</th><th>measured (noisy)</th><th>± 95% noise</th>"
                   "<th>synthetic rows</th></tr>")
        for label, count, synthetic in zip(labels, m.counts.tolist(), f.tolist(), strict=True):
            out.append(f"<tr><td class=k>{e(label) or '<em>missing</em>'}</td><td>{count}</td><td>{half:.1f}</td>"
                       f"<td>{synthetic}</td></tr>")
        out.append("</table>")
    out.append("</body></html>\n")
    return "\n".join(out)
