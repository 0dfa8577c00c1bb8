"""The report and the Markdown summary say what the release is (issue 25, finding 7): bins by their values and on
a numeric axis, every number with its uncertainty, intervals that cover the noise only, the budget where the page
says it is, a `flag` column only under a small-cell policy, a summary line of use for several cells, written once
per release."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from dpcli.errors import UsageError
from dpcli.publish import plots, report_data, summary
from tests.helpers import run_in_process
from tests.spec_builder import spec_text

SPEC = spec_text(
    {"age": "{type: int, bounds: [0, 100]}", "sex": "{type: category, categories: [F, M]}",
     "job": "{type: category, categories: [a, b, c, d]}"},
    ["{name: n_by_sex, kind: count, by: [sex], postprocess: {small_cells: {max_relative_width: 0.5, action: flag}}}",
     "{name: age_grid, kind: histogram, column: age, bins: {start: 0, stop: 100, step: 10}}",
     "{name: age_by_sex, kind: histogram, column: age, bins: [0, 18, 65, 101], by: [sex]}",
     "{name: med, kind: median, column: age}",
     "{name: quart, kind: quantile, column: age, q: [0.25, 0.75], interval: {share: 0.5}}",
     "{name: top, kind: top_k, column: job, k: 2}"],
    privacy="unit: row, neighbours: add_remove, epsilon: 4",
)


def _data() -> str:
    rng = random.Random(7)
    rows = [f"{rng.randint(0, 99)},{rng.choice('FM')},{rng.choice('abcd')}" for _ in range(300)]
    return "age,sex,job\n" + "\n".join(rows) + "\n"


def _release(work: Path) -> None:
    r = run_in_process(
        "release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl", "-o", work / "out.csv",
        "--release-id", "d1", "--report", work / "report.html", "--summary-md", work / "summary.md",
    )
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("truth")
    (work / "spec.yaml").write_text(SPEC)
    (work / "data.csv").write_text(_data())
    assert run_in_process("budget", "set", "toy", "--epsilon", "10", "--ledger", work / "L.jsonl").returncode == 0
    _release(work)
    return work


def _sections(page: str) -> dict[str, str]:
    """Each statistic's section of the page, by name."""
    parts = re.findall(r"<section class='statistic' id='stat-\d+' data-statistic='([^']*)'>(.*?)</section>", page,
                       re.S)
    return dict(parts)


def _rows(section: str) -> list[list[str]]:
    """The cells of each row of a section's table (the header row left out)."""
    table = section.split("<table>", 1)[1]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in table.split("<tr")[2:]]


def test_an_even_grid_is_described_by_its_values(released: Path) -> None:
    """Before: "bins start, stop, step" (the keys of the sidecar's mapping, not its values)."""
    section = _sections((released / "report.html").read_text())["age_grid"]
    assert "10 bins of width 10 from 0 to 100" in section
    assert "start, stop, step" not in section


def test_the_guarantee_box_points_to_the_budget_where_it_is(released: Path) -> None:
    """Before: the box said the budget left "is shown above"; the Budget section comes after it."""
    page = (released / "report.html").read_text()
    box = page.split('<div class="box" id="guarantee">', 1)[1].split("</div>", 1)[0]
    said = re.search(r"the budget left is shown (above|below)", box)
    assert said is not None, box
    budget = re.search(r"<h2[^>]*>Budget</h2>", page).start()
    where = "below" if budget > page.index('id="guarantee"') else "above"
    assert said.group(1) == where


def test_the_page_says_the_intervals_cover_the_noise_only(released: Path) -> None:
    page = (released / "report.html").read_text()
    assert "they cover the privacy noise only, not sampling error" in page
    box = page.split('id="guarantee"', 1)[1].split("</div>", 1)[0]
    assert "<b>not sampling error</b>" in box


def test_every_published_number_shows_its_uncertainty(released: Path) -> None:
    """Before: a median's row had an empty interval and its rank bound (the plan's, in the sidecar) was nowhere."""
    page = (released / "report.html").read_text()
    meta = json.loads((released / "out.csv.meta.json").read_text())
    rank = {s["name"]: s["noise"][0]["rank_error95"] for s in meta["statistics"] if s["kind"] == "median"}
    for name, section in _sections(page).items():
        for cells in _rows(section):
            _label, value, uncertainty = cells[:3]
            assert value, (name, cells)
            assert uncertainty, (name, cells)
            if name == "med":
                assert uncertainty.startswith(f"rank ±{rank['med']} rows (95%)"), cells
            elif name == "top":
                assert uncertainty.startswith("none: a rank"), cells
            else:  # the table's own interval
                assert re.fullmatch(r"-?[0-9.]+ to -?[0-9.]+", uncertainty), (name, cells)


def test_flag_column_only_where_a_policy_declares_it(released: Path) -> None:
    """Before: every statistic's table had a `flag` column, empty everywhere but under a small-cell policy."""
    sections = _sections((released / "report.html").read_text())
    with_flag = {name for name, section in sections.items() if "<th>flag</th>" in section}
    assert with_flag == {"n_by_sex"}
    assert all(len(cells) == 4 for cells in _rows(sections["n_by_sex"]))
    assert all(len(cells) == 3 for cells in _rows(sections["age_grid"]))


def _bar_widths(svg: str) -> list[float]:
    """The widths of the bars of a matplotlib SVG (filled rectangles in the bars' colour), in the SVG's order."""
    widths = []
    for d, style in re.findall(r'<path d="([^"]+)"[^>]*style="([^"]*)"', svg):
        if "fill: #2563eb" not in style:
            continue
        xs = [float(x) for x in re.findall(r"[ML] (-?[0-9.]+) -?[0-9.]+", d)]
        widths.append(max(xs) - min(xs))
    return widths


def test_histograms_are_bins_on_a_numeric_axis(released: Path) -> None:
    """Before: horizontal bars, one per bin, each as long as its count, with the bins as text labels: every bar the
    same thickness whatever its bin's width. Now a bar spans its bin: widths in the proportion of the bins' widths
    (0-18, 18-65, 65-101), one panel per `by:` group, the group named in each row's label."""
    section = _sections((released / "report.html").read_text())["age_by_sex"]
    widths = _bar_widths(section)
    assert len(widths) == 6, widths
    for panel in (widths[:3], widths[3:]):
        unit = panel[0] / 18
        assert [round(w / unit, 1) for w in panel] == [18.0, 47.0, 36.0]
    labels = [cells[0] for cells in _rows(section)]  # before: "[0..18) · [0..18)", the sex left out
    assert labels == [f"{s} × {b}" for s in "FM" for b in ("[0..18)", "[18..65)", "[65..101)")]


def test_a_table_without_bin_columns_takes_its_bins_from_the_sidecar(released: Path, tmp_path: Path) -> None:
    """A table of contract 0.2 (no bin_low/bin_high): each row's bin from the sidecar's grid, checked against the
    row's label."""
    lines = (released / "out.csv").read_text().splitlines()
    head = lines[0].split(",")
    keep = [i for i, c in enumerate(head) if c not in ("bin_low", "bin_high", "kind", "column")]
    table = tmp_path / "old.csv"
    table.write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in lines) + "\n")
    data = report_data.load(table, released / "out.csv.meta.json")
    grid = next(v for v in data.statistics if v.name == "age_grid")
    assert plots.bin_edges(grid, grid.rows) == [(float(lo), float(lo + 10)) for lo in range(0, 100, 10)]


def _summary_line(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_the_summary_shows_several_cells(released: Path) -> None:
    """Before: value and interval were empty for every statistic with more than one cell."""
    text = (released / "summary.md").read_text()
    rows = [line.split(",") for line in (released / "out.csv").read_text().splitlines()]
    head = rows[0]
    grid = [dict(zip(head, r, strict=True)) for r in rows[1:] if r[0] == "age_grid"]
    values = sorted(int(r["value"]) for r in grid)
    widest = max(max(int(r["value"]) - int(r["ci_low"]), int(r["ci_high"]) - int(r["value"])) for r in grid)
    assert _summary_line(text, "age_grid") == ["age_grid", "histogram", "10", f"{values[0]} to {values[-1]}",
                                               f"±{widest} at most"]
    top = [dict(zip(head, r, strict=True)) for r in rows[1:] if r[0] == "top"]
    ranked = ", ".join(f"{r['value']}. {r['job']}" for r in sorted(top, key=lambda r: int(r["value"])))
    assert _summary_line(text, "top")[3] == ranked
    assert _summary_line(text, "med")[4].startswith("rank ±")
    assert "Intervals cover the privacy noise only, not sampling error." in text


def test_the_summary_is_written_once_per_release(released: Path) -> None:
    """Before: every re-run under the same release id (a re-issue, nothing spent) appended another block."""
    heading = "### dpcli release: toy (d1, ledger record 1)"
    _release(released)  # the same release id again: a re-issue
    r = run_in_process("report", released / "out.csv", "-o", released / "again.html", "--summary-md",
                       released / "summary.md")
    assert r.returncode == 0, r.stderr
    text = (released / "summary.md").read_text()
    assert text.count("### dpcli release") == 1
    assert text.count(heading) == 1


def test_the_summary_s_range_reads_every_row_and_refuses_a_number_no_float_holds(tmp_path: Path) -> None:
    """The range and the widest interval read every row, past the rows the page keeps: a number beyond ±1e300 there
    is exit 2 as in the rows shown (never a decimal overflow, exit 1)."""
    table = tmp_path / "t.csv"
    table.write_text("statistic,value,ci_low,ci_high\n" + "n,1,0,2\n" * 300 + "n,7,1,9\n")
    assert summary.render_markdown(report_data.load(table)).count("| n |  | 301 | 1 to 7 | ±6 at most |") == 1
    table.write_text("statistic,value,ci_low,ci_high\n" + "n,1,0,2\n" * 300 + "n,1e999999999,0,2\n")
    with pytest.raises(UsageError, match="beyond"):
        report_data.load(table)
