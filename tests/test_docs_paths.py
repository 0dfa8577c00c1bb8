"""Every file the documentation names exists, and every name it gives beside a file is defined there.

The docs name modules and tests by path (`dpcli/run/paid.py`, `tests/run/test_faults.py::test_x`) and a few
definitions beside them (`dpcli/publish/sidecar.py` `_component_meta`); a move or a rename that forgets the docs
fails here instead of sending a reader to a file that is gone. CHANGELOG.md is history and keeps the old names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "bench" / "README.md",
               ROOT / "examples" / "README.md"])
# a path in backquotes, optionally a test's node id, optionally followed by a name in backquotes
NAMED = re.compile(r"`((?:dpcli|tests|scripts|bench|examples)/[\w/.-]*\w)(?:::(\w+))?`(?:\s+`(\w+)`)?")


def named_paths(text: str) -> list[tuple[str, str | None, str | None]]:
    return [(m.group(1), m.group(2), m.group(3)) for m in NAMED.finditer(text)]


def defines(source: str, name: str) -> bool:
    return re.search(rf"^\s*(?:def|class|async def)\s+{name}\b|^\s*{name}\s*[:=]", source, re.M) is not None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_named_file_and_definition_exists(doc: Path) -> None:
    missing = []
    for path, test, name in named_paths(doc.read_text(encoding="utf-8")):
        if path.startswith("bench/data/"):  # what the benches write (git-ignored), not part of the tree
            continue
        target = ROOT / path
        if not target.exists():
            missing.append(path)
            continue
        if target.is_file() and target.suffix == ".py":
            source = target.read_text(encoding="utf-8")
            missing += [f"{path}::{n}" for n in (test, name) if n is not None and not defines(source, n)]
    assert missing == []


def test_a_missing_file_or_name_is_found() -> None:
    # the check itself: a path that is gone and a name the file does not define are both reported
    found = named_paths("see `dpcli/output.py` and `dpcli/run/paid.py` `PaidRun`, `dpcli/run/paid.py` `_gone`")
    assert found == [("dpcli/output.py", None, None), ("dpcli/run/paid.py", None, "PaidRun"),
                     ("dpcli/run/paid.py", None, "_gone")]
    source = (ROOT / "dpcli" / "run" / "paid.py").read_text(encoding="utf-8")
    assert defines(source, "PaidRun")
    assert not defines(source, "_gone")
