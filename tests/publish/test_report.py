"""`dpcli report` and `release --report/--summary-md`: one self-contained HTML page and an appended Markdown summary."""

from __future__ import annotations

import html
import json
import random
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dpcli.publish import report, report_data, report_inputs, summary
from dpcli.publish.summary import _md
from tests.helpers import run_in_process
from tests.spec_builder import spec_text

SPEC = spec_text(
    {"age": "{type: int, bounds: [0, 100]}", "sex": "{type: category, categories: [F, M]}",
     "job": "{type: category, categories: [a, b, c, d]}"},
    ["{name: n, kind: count}", "{name: n_by_sex, kind: count, by: [sex]}",
     "{name: age_hist, kind: histogram, column: age, bins: [0, 18, 65, 101]}",
     "{name: mean_age_by_sex, kind: mean, column: age, by: [sex]}",
     "{name: age_quartiles, kind: quantile, column: age, q: [0.25, 0.5, 0.75]}",
     "{name: top_jobs, kind: top_k, column: job, k: 2}"],
)
NAMES = ["n", "n_by_sex", "age_hist", "mean_age_by_sex", "age_quartiles", "top_jobs"]


def _data() -> str:
    rng = random.Random(1)
    rows = [f"{rng.randint(0, 99)},{rng.choice('FM')},{rng.choice('abcd')}" for _ in range(300)]
    return "age,sex,job\n" + "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One release with its report and summary (the summary file already holds an earlier step's text)."""
    work = tmp_path_factory.mktemp("report")
    (work / "spec.yaml").write_text(SPEC)
    (work / "data.csv").write_text(_data())
    (work / "summary.md").write_text("earlier step\n")
    r = run_in_process("budget", "set", "toy", "--epsilon", "10", "--ledger", work / "L.jsonl")
    assert r.returncode == 0, r.stderr
    r = run_in_process(
        "release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl", "-o", work / "out.csv",
        "--release-id", "r1", "--report", work / "report.html", "--summary-md", work / "summary.md",
    )
    assert r.returncode == 0, r.stderr
    return work


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text of <style> blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data


def _parse(page: str) -> _Elements:
    p = _Elements()
    p.feed(page)
    return p


def _plots(page: str) -> dict[str, list[str]]:
    """Each plot element's statistic and the tags inside it."""
    out: dict[str, list[str]] = {}
    current = None
    depth = 0

    class P(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            nonlocal current, depth
            a = dict(attrs)
            if tag == "figure" and "plot" in (a.get("class") or "").split():
                current, depth = a.get("data-statistic"), 0
                out[str(current)] = []
            elif current is not None:
                out[str(current)].append(tag)
                if tag == "figure":
                    depth += 1

        def handle_endtag(self, tag: str) -> None:
            nonlocal current, depth
            if tag == "figure" and current is not None:
                if depth == 0:
                    current = None
                else:
                    depth -= 1

    P().feed(page)
    return out


def assert_self_contained(page: str) -> None:
    """Nothing the page could fetch: no script, stylesheet link, image, frame, object or font; every reference is
    to an element of the page itself (#id) or inline data."""
    p = _parse(page)
    fetching = {"script", "link", "img", "iframe", "object", "embed", "video", "audio", "source", "base", "image"}
    assert not [t for t, _ in p.tags if t in fetching]
    for tag, attrs in p.tags:
        for name, value in attrs.items():
            if name in ("href", "xlink:href", "src", "srcset", "data", "poster", "action"):
                assert value is not None, (tag, name, value)
                assert value.startswith("#"), (tag, name, value)
            assert not (name.startswith("on")), (tag, name)  # no inline script either
    lowered = page.lower()
    assert "@import" not in lowered
    assert "@font-face" not in lowered
    # url(...) only to the page's own elements (matplotlib's clip paths are url(#id))
    assert all(rest.lstrip("'\" ").startswith("#") for rest in lowered.split("url(")[1:])


def test_release_report_has_a_plot_per_statistic(released: Path) -> None:
    page = (released / "report.html").read_text()
    plots = _plots(page)
    assert list(plots) == NAMES
    for name in NAMES:
        inner = plots[name]
        assert ("ol" in inner) if name == "top_jobs" else ("svg" in inner), name
    # the histogram has one bar per bin, drawn as a patch each (matplotlib's SVG: one <g id="patch_N"> per artist)
    assert "[18, 65)" in page or "[18..65)" in page


def test_report_is_self_contained(released: Path) -> None:
    assert_self_contained((released / "report.html").read_text())


@pytest.mark.parametrize(
    "injected",
    ['<script src="x.js"></script>', '<img src="https://e.example/x.png">', "<style>@import url(x.css)</style>",
     '<a href="https://e.example/">x</a>', '<svg><use xlink:href="https://e.example/s.svg#a"/></svg>',
     '<div style="background:url(https://e.example/x.png)"></div>'],
)
def test_self_contained_check_can_fail(released: Path, injected: str) -> None:
    page = (released / "report.html").read_text().replace("</body>", injected + "</body>")
    with pytest.raises(AssertionError):
        assert_self_contained(page)


def test_report_states_budget_parameters_and_guarantee(released: Path) -> None:
    page = (released / "report.html").read_text()
    assert "This release spent <b>ε=1</b>" in page  # as `dpcli release` says it
    assert "ε = 9 is left" in page
    assert "cap is ε = 10" in page
    assert 'id="guarantee"' in page
    assert "What it does not mean" in page
    assert "discrete_laplace" in page
    assert "noise scale" in page  # the public parameters, from the sidecar
    assert str(released) not in page  # no directory of the operator's machine


def test_summary_is_appended(released: Path) -> None:
    text = (released / "summary.md").read_text()
    assert text.startswith("earlier step\n### dpcli release: toy (r1, ledger record 1)\n")
    assert "- spent: ε=1\n- left: ε 9 of 10\n" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0][2:] for line in table[1:]] == NAMES


def test_report_command_from_table_and_sidecar(released: Path) -> None:
    out = released / "again.html"
    r = run_in_process("report", released / "out.csv", "-o", out, "--ledger", released / "L.jsonl",
                       "--summary-md", released / "again.md")
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert list(_plots(page)) == NAMES
    assert "ε = 9 is left" in page
    assert (released / "again.md").read_text().count("### dpcli release: toy (r1, ledger record 1)") == 1


def test_report_without_ledger_or_sidecar_says_so(released: Path, tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_bytes((released / "out.csv").read_bytes())  # no sidecar beside this copy
    r = run_in_process("report", table, "-o", tmp_path / "r.html")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    assert "is <b>not known here</b>: the ledger was not given" in page
    assert "the public parameters (bounds, bins, mechanisms, noise scales) are <b>not known here</b>" in page
    assert list(_plots(page)) == NAMES  # still a plot each, kinds unknown
    # with the sidecar named by --meta, the kinds are back (the histogram's bars)
    r = run_in_process("report", table, "-o", tmp_path / "m.html", "--meta", released / "out.csv.meta.json")
    assert r.returncode == 0, r.stderr
    assert "age_hist <small>(histogram, column age)" in (tmp_path / "m.html").read_text()


def test_table_of_contract_03_columns_flags_and_bins(tmp_path: Path) -> None:
    """Read by column name: kind, column, bin_low/bin_high and flag (contract 0.3) are used where present."""
    table = tmp_path / "t.csv"
    table.write_text(
        "statistic,kind,column,sex,age,bin_low,bin_high,value,ci_low,ci_high,epsilon,flag\n"
        "h,histogram,age,,[0..18),0,18,40,20,60,0.5,\n"
        "h,histogram,age,,[18..65),18,65,3,-17,23,0.5,flagged\n"
        "h,histogram,age,,[65..101),65,101,,,,0.5,suppressed\n"
        "m,mean,age,F,,,,40.5,30,50,0.5,\n"
    )
    data = report_data.load(table)
    h, m = data.statistics
    assert (h.kind, h.column, m.kind) == ("histogram", "age", "mean")
    assert [r.flag for r in h.rows] == ["", "flagged", "suppressed"]
    assert h.rows[2].value is None
    assert [r.bin_low for r in h.rows] == ["0", "18", "65"]
    page = report.render_html(data)
    assert "<tr class='suppressed'><td>[65..101)</td><td class='num'>suppressed</td>" in page
    assert "2 cell(s) flagged or suppressed" in page
    assert list(_plots(page)) == ["h", "m"]
    md = summary.render_markdown(data)
    assert "| h | histogram | 3 | 3 to 40 | ±20 at most (2 flagged/suppressed) |" in md


def test_markdown_escapes_pipes(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("statistic,value,ci_low,ci_high,epsilon\na|b,1,0,2,1\n")
    md = summary.render_markdown(report_data.load(table))
    assert "| a\\|b |  | 1 | 1 | 0 to 2 |" in md


def test_a_bad_table_is_refused_without_quoting_it(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("statistic,value,ci_low,ci_high\nn,SECRET42,1,2,extra-SECRET\n")
    r = run_in_process("report", table, "-o", tmp_path / "r.html")
    assert r.returncode == 2
    assert b"line 2 does not have 4 fields" in r.stderr
    assert b"SECRET" not in r.stderr
    table.write_text("who,what\nSECRET,1\n")
    r = run_in_process("report", table, "-o", tmp_path / "r.html")
    assert r.returncode == 2
    assert b"has no 'statistic' or 'value' column" in r.stderr
    assert b"SECRET" not in r.stderr
    assert not (tmp_path / "r.html").exists()


def test_release_report_in_a_missing_directory_is_refused_before_the_spend(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "data.csv").write_text(_data())
    assert run_in_process("budget", "set", "toy", "--epsilon", "10", "--ledger", tmp_path / "L.jsonl").returncode == 0
    r = run_in_process("release", tmp_path / "spec.yaml", "-i", tmp_path / "data.csv", "--ledger", tmp_path / "L.jsonl",
                       "-o", tmp_path / "out.csv", "--report", tmp_path / "nowhere" / "r.html")
    assert r.returncode == 3
    assert b"does not exist" in r.stderr  # as for the table's own directory
    records = [json.loads(line) for line in (tmp_path / "L.jsonl").read_text().splitlines()]
    assert [rec["type"] for rec in records] == ["cap"]


def test_other_commands_do_not_import_matplotlib() -> None:
    code = "import sys, dpcli.cli.app, dpcli.run.release; assert 'matplotlib' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_page_is_reproducible_and_leaves_matplotlib_settings_alone(released: Path) -> None:
    import matplotlib

    before = dict(matplotlib.rcParams)
    first = report.render_html(report_data.load(released / "out.csv"))
    assert report.render_html(report_data.load(released / "out.csv")) == first  # no date, no random ids
    assert dict(matplotlib.rcParams) == before
    # ids of the figures' clip paths and markers do not collide between the figures of one page
    ids = [part.split('"', 1)[0] for part in first.split(' id="')[1:]]
    assert len(ids) == len(set(ids))


# -- the guarantee the ledger charged, as `dpcli release` says it (issue 23, finding 3) ------------------------------

_ONE = {"age": "{type: int, bounds: [0, 100]}", "k": "{type: category, categories: open, max_length: 8}"}
FORMS = {  # name -> (privacy, statistic, cap's delta)
    "pure": ("epsilon: 1", "{name: n, kind: count}", "0"),
    "rho": ("rho: 0.01, delta: 1e-6", "{name: n, kind: count, mechanism: gaussian}", "1e-5"),
    "rho at the cap's delta": ("rho: 0.01", "{name: n, kind: count, mechanism: gaussian}", "1e-5"),
    "epsilon and delta, zCDP": ("epsilon: 1, delta: 1e-6", "{name: n, kind: count, mechanism: gaussian}", "1e-5"),
    "open keys, selection delta": ("epsilon: 1, delta: 1e-6", "{name: by_k, kind: count, by: [k]}", "1e-5"),
}
# two forms in `make test` (its time budget), every form in `make test-slow`
_DEFAULT_FORMS = ("rho at the cap's delta", "open keys, selection delta")


@pytest.mark.parametrize(
    "form", [f if f in _DEFAULT_FORMS else pytest.param(f, marks=pytest.mark.slow) for f in FORMS]
)
def test_report_and_summary_state_what_release_printed(tmp_path: Path, form: str) -> None:
    """Before: a zCDP release's page said "ε = 0 for this release" and its summary "spent: ε 0"."""
    privacy, statistic, cap_delta = FORMS[form]
    text = spec_text(_ONE, [statistic], privacy=f"unit: row, neighbours: add_remove, {privacy}")
    (tmp_path / "spec.yaml").write_text(text)
    (tmp_path / "data.csv").write_text("age,k\n" + "30,x\n" * 200)
    ledger = tmp_path / "L.jsonl"
    r = run_in_process("budget", "set", "toy", "--epsilon", "10", "--delta", cap_delta, "--ledger", ledger)
    assert r.returncode == 0, r.stderr
    r = run_in_process("release", tmp_path / "spec.yaml", "-i", tmp_path / "data.csv", "--ledger", ledger, "-o",
                       tmp_path / "out.csv", "--report", tmp_path / "r.html", "--summary-md", tmp_path / "s.md")
    assert r.returncode == 0, r.stderr
    printed = r.stderr.decode().split("  spent ", 1)[1].split("; ε left", 1)[0]  # what `dpcli release` said
    if form == "pure":
        assert printed == "ε=1"
    elif form == "open keys, selection delta":
        assert printed == "ε=1, δ=0.000001"
    else:
        assert printed.startswith("ρ="), printed
        assert " zCDP (≈ ε=" in printed, printed  # (ε, δ): the cap's δ if no other
    page, summary = (tmp_path / "r.html").read_text(), (tmp_path / "s.md").read_text()
    assert f"This release spent <b>{html.escape(printed)}</b>" in page
    assert f"<b class='spent'>{html.escape(printed)}</b>" in page  # the guarantee box says the same
    assert f"- spent: {_md(printed)}\n" in summary
    for zero in ("ε = 0 ", "ε=0 ", "ε=0;", "ε 0\n"):
        assert zero not in page, zero
        assert zero not in summary, zero
    # `dpcli report` from the table and its sidecar (and the ledger, for the cap's δ) says it too
    r = run_in_process("report", tmp_path / "out.csv", "-o", tmp_path / "again.html", "--ledger", ledger)
    assert r.returncode == 0, r.stderr
    assert f"This release spent <b>{html.escape(printed)}</b>" in (tmp_path / "again.html").read_text()


# -- text the report did not write is never markup (issue 23, finding 10) ------------------------------------------

HOSTILE_KEYS = ["$10K-$50K", "$\\frac{$", "<img src=x onerror=alert(1)>", "![i](https://e.example/x.png)",
                "--><script>alert(1)</script>", "a|b\\n`c`"]


def test_keys_with_markup_are_text_in_the_page(tmp_path: Path) -> None:
    """Declared keys like $10K-$50K were parsed as mathtext ($\\frac{$ ended a paid release with exit 1)."""
    keys = ", ".join(json.dumps(k) for k in HOSTILE_KEYS)
    (tmp_path / "spec.yaml").write_text(
        spec_text({"inc": f"{{type: category, categories: [{keys}]}}"}, ["{name: by_inc, kind: count, by: [inc]}"])
    )
    (tmp_path / "data.csv").write_text("inc\n" + "$10K-$50K\n" * 5)
    ledger = tmp_path / "L.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "10", "--ledger", ledger).returncode == 0
    r = run_in_process("release", tmp_path / "spec.yaml", "-i", tmp_path / "data.csv", "--ledger", ledger, "-o",
                       tmp_path / "out.csv", "--report", tmp_path / "r.html")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    assert_self_contained(page)
    assert "<img" not in page
    assert "<script" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "$10K-$50K" in page  # the table's cells, escaped


def _unescaped(md: str, raw: str) -> bool:
    """Whether ``raw`` occurs in ``md`` with its first character not backslash-escaped (so it opens markup)."""
    return re.search(r"(?<!\\)" + re.escape(raw), md) is not None


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_a_hostile_table_or_sidecar_is_exit_2_with_a_message(released: Path, tmp_path: Path) -> None:
    """Before: 1e400 was an OverflowError, nested JSON a RecursionError, a sidecar of the wrong shape an
    AttributeError or TypeError: all exit 1, an internal error."""
    good_meta = json.loads((released / "out.csv.meta.json").read_text())
    table = released / "out.csv"
    deep = "[" * 100_000 + "]" * 100_000
    cases = {
        "1e400 in the table": (_write(tmp_path / "t1.csv", "statistic,value,ci_low,ci_high\nn,1e400,1,2\n"), None),
        "a huge number": (_write(tmp_path / "t2.csv", "statistic,value,ci_low,ci_high\nn,1e301,1,2\n"), None),
        "a JSON table nested deeply": (_write(tmp_path / "t3.json", deep), None),
        "a JSON table with an object in a cell": (_write(tmp_path / "t4.json", '[{"statistic": "n", "value": {}}]'),
                                                  None),
        "a CSV field past the csv module's limit": (
            _write(tmp_path / "t5.csv", "statistic,value\n" + "x" * 200_000 + ",1\n"), None),
        "a table that is not UTF-8": (_write(tmp_path / "t6.csv", b"statistic,value\n\xff,1\n"), None),
        "a sidecar nested deeply": (table, _write(tmp_path / "m1.json", deep)),
        "a sidecar that is a list": (table, _write(tmp_path / "m2.json", "[1, 2]")),
        "statistics not a list": (table, _write(tmp_path / "m3.json", json.dumps({**good_meta, "statistics": 5}))),
        "a statistic's noise not a list": (table, _write(tmp_path / "m4.json", json.dumps(
            {**good_meta, "statistics": [{**good_meta["statistics"][0], "noise": 7}]}))),
        "columns of the wrong shape": (table, _write(tmp_path / "m5.json", json.dumps({**good_meta, "columns": [1]}))),
        "an integer of 5000 digits": (table, _write(tmp_path / "m6.json", json.dumps(good_meta).replace(
            '"record": 1', '"record": ' + "9" * 5000))),
        "epsilon not exact text": (table, _write(tmp_path / "m7.json", json.dumps({**good_meta, "epsilon": 1e400}))),
        "NaN": (table, _write(tmp_path / "m8.json", json.dumps(good_meta).replace('"cells": 1', '"cells": NaN'))),
    }
    for name, (t, meta) in cases.items():
        out = tmp_path / "r.html"
        r = run_in_process("report", t, "-o", out, *(["--meta", meta] if meta else []))
        err = r.stderr.decode()
        assert r.returncode == 2, (name, err)
        assert err.startswith("dpcli: error: "), (name, err)
        assert err.count("\n") == 1, (name, err)
        assert "internal" not in err, (name, err)
        assert not out.exists(), name
    good = _write(tmp_path / "m0.json", json.dumps(good_meta))
    assert report_inputs.read_sidecar(good) == good_meta  # as written: valid


def test_markdown_escapes_html_images_links_and_math(released: Path, tmp_path: Path) -> None:
    """Before, table cells and sidecar strings went into $GITHUB_STEP_SUMMARY as they were: raw HTML, images."""
    table = _write(tmp_path / "t.csv", "statistic,value,ci_low,ci_high\n"
                   '"<img src=x>",1,0,2\n"![a](https://e.example/a.png)",<b>1</b>,0,2\n'
                   '"$\\frac{1}{2}$ *b* `c` &amp; _d_",1,0,2\n')
    meta = json.loads((released / "out.csv.meta.json").read_text())
    sidecar = _write(tmp_path / "m.json", json.dumps({**meta, "dataset": "<img src=y>", "release_id": "![r](x)"}))
    md = summary.render_markdown(report_data.load(table, sidecar))
    for raw in ("<img", "<b>", "![", "](", "$\\frac", "*b*", "`c`", "&amp;", "_d_"):
        assert not _unescaped(md, raw), raw
    assert "\\<img src=x\\>" in md
    assert "\\!\\[a\\](https://e.example/a.png)" in md
    assert "\\<img src=y\\>" in md
