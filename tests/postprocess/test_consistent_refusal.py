"""Issue 25 (8): counts asking for `consistent: true` that cannot be made consistent for want of `impute:` are
refused before the spend (exit 2: plan, check and release alike), not released inconsistent with a note in the plan
only. Statistics left alone for another reason keep their note."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.helpers import run_in_process
from tests.spec_builder import spec_text

SEX = "{type: category, categories: [F, M]}"
STATS = ["{name: total, kind: count}", "{name: by_sex, kind: count, by: [sex]}"]
EXTRA = "postprocess: {consistent: true}\n"
DATA = "sex\nF\nM\n\nF\n"
REFUSAL = (
    "dpcli: error: postprocess.consistent: 'total' and 'by_sex' ask for consistent: true but do not count the same "
    "rows: a row with no declared key (or bin) of sex is counted by the first and left out of the second; give sex "
    "an impute: (a histogram's bins covering the bounds), or set consistent: false on one of them\n"
)


def test_refused_before_the_spend_without_impute(make_work: Callable[..., Path]) -> None:
    work = make_work(spec_text({"sex": SEX}, STATS, extra=EXTRA), DATA, cap="10")
    ledger = (work / "L.jsonl").read_bytes()
    for args in (("plan",), ("check",), ("release", "-i", work / "data.csv", "--ledger", work / "L.jsonl",
                                        "-o", work / "o.csv")):
        r = run_in_process(args[0], work / "spec.yaml", *args[1:])
        assert (r.returncode, r.stderr.decode()) == (2, REFUSAL), args[0]
    assert (work / "L.jsonl").read_bytes() == ledger  # nothing spent
    assert not (work / "o.csv").exists()


def test_with_impute_they_are_made_consistent_and_other_notes_stay(make_work: Callable[..., Path]) -> None:
    imputed = {"sex": "{type: category, categories: [F, M], impute: F}"}
    work = make_work(spec_text(imputed, STATS, extra=EXTRA), DATA)
    r = run_in_process("plan", work / "spec.yaml")
    assert r.returncode == 0, r.stderr
    assert "total: consistent with by_sex" in r.stdout.decode()
    # by_sex and by_city share no breakdown: each is left alone, with its note, as before
    columns = {"sex": SEX, "city": "{type: category, categories: [x, y]}"}
    stats = ["{name: by_sex, kind: count, by: [sex]}", "{name: by_city, kind: count, by: [city]}"]
    (work / "spec.yaml").write_text(spec_text(columns, stats, extra=EXTRA))
    r = run_in_process("plan", work / "spec.yaml")
    assert r.returncode == 0, r.stderr
    assert "by_city: not made consistent: no other statistic with consistent: true" in r.stdout.decode()
    # and a statistic that opts out is not refused
    stats = [STATS[0], "{name: by_sex, kind: count, by: [sex], postprocess: {consistent: false}}"]
    (work / "spec.yaml").write_text(spec_text({"sex": SEX}, stats, extra=EXTRA))
    assert run_in_process("plan", work / "spec.yaml").returncode == 0
