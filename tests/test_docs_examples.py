"""Every console example in README.md and docs/*.md runs, verbatim or with a substitution written down below; every
relative link of the repository's Markdown files reaches its file and heading.

A ```console block is a list of `$ COMMAND` lines, each followed by the output it shows (if any). The examples of one
document run in order in one scratch directory holding copies of configs/, sample_data/, scripts/ and tests/data/,
as a reader who follows the document would run them (the quick start's ledger is the one later examples use), with
the `dpcli` of this test's venv first on PATH and no DPCLI_* variable from the caller. Each command runs under
`bash -o pipefail`.

- Exit status: 0, unless the command ends in a comment `# exit N` (then N), or its shown output has a
  `dpcli: error:` line (then non-zero).
- Shown output: every shown line must appear in the command's stdout and stderr, in order, modulo noise: runs of
  whitespace are one space (tables and wrapped lines); hex digests are `H` and numbers (`3`, `-0.9`, `1e-6`) are
  `N` (noisy values, hashes, record numbers); the side of `dpcli audit`'s strongest event (`Z ≥`/`Z ≤`, D/D') is
  drawn too. `…` stands for lines left out. So a header line must match exactly, and a message word for word.

Substitutions (in `run` and NOT_RUN below), the only liberties the test takes with the text:
- `.venv/bin/` is the bin directory of this test's venv; `/tmp/` is the scratch directory.
- `. .venv/bin/activate` is a no-op (the venv's bin is already first on PATH).
- `dpcli init CSV > spec.yaml` (or `-o spec.yaml`), which docs/commands.md follows with "then fill in the TODOs from
  documentation": after init ran (and wrote TODOs), spec.yaml is filled as that says, from documentation: with
  configs/example.yaml's columns and statistics (its `input:` made relative to spec.yaml's directory).
- `jq` (when the machine has none): the JSON is checked with `python -m json.tool` instead.
- Installing (`python3 -m venv ... pip install .`), `make demo`, `make test`, `make check`, `make docs`,
  `make wheel-check`, `make bench`, the benchmark scripts and pytest are not run here (.ci/run runs the make
  targets, `make bench` the benchmarks): the files they name must exist, and no command may sit in a fence other
  than ```console, where this test would not see it (docs/cli.md aside: the commands' --help, generated).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_in_process

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COPIED = ["configs", "sample_data", "scripts", "tests/data"]
VENV_BIN = Path(sys.executable).parent

INSTALL = "README.md's Install: tests/test_examples.py runs it (clean venvs, a local tagged repository as URL)"
# Commands shown but not run here, with the reason (matched on the command without its trailing comment).
NOT_RUN = {
    "make demo": "builds a venv; `make demo` is run on a fresh clone",
    "make test": "the suite itself",
    "make bench": "minutes of benchmarks; bench/ is run by `make bench`",
    "make check": ".ci/run runs it",
    "make docs": "rewrites docs/ from the code; `make check` runs its --check",
    "make wheel-check": ".ci/run runs it (a wheel build and a clean venv: half a minute)",
    "python3 -m venv .venv && .venv/bin/pip install .": "installs dpcli; the suite runs in the venv it makes",
    "git clone URL dpcli && cd dpcli && git checkout v0.3.0": INSTALL,
    "python3 -m venv .venv && .venv/bin/pip install 'dpcli @ git+URL@v0.3.0'": INSTALL,
    "make wheel": INSTALL,
    "python3 -m venv .venv && .venv/bin/pip install ./dist/dpcli-0.3.0-py3-none-any.whl": INSTALL,
    "bash bench/opendp_venv.sh": "a benchmark in a venv of its own, with OpenDP installed from PyPI",
    ".venv/bin/python -m pytest tests/cli -q": "part of this suite",
    '/usr/bin/time -v .venv/bin/python -m pytest -q -p no:xdist --durations=0 -m "not slow and not spark and not '
    'postgres"': "the suite itself, serially (docs/benchmarks.md measures it)",
}
NO_OP = {". .venv/bin/activate"}
GENERATED_HELP = {"cli.md"}
# Any benchmark script with any arguments (bench_persons.py, bench_spark.py, ...): minutes, a 3 GB file, Spark or a
# venv of its own; `make bench` runs them. Shown but not run, like NOT_RUN; the script must exist.
BENCHMARK = re.compile(r"^\.venv/bin/python bench/bench_\w+\.py(?:\s|$)")
INIT_THEN_FILL = re.compile(r"^dpcli init (\S+) (?:>|-o|--output) (\S+)")
EXIT_COMMENT = re.compile(r"#\s*exit (\d+)\s*$")


@dataclass
class Example:
    document: str
    line: int  # 1-based line of the `$ ` command in the document
    command: str
    shown: list[str] = field(default_factory=list)


def examples(path: Path) -> list[Example]:
    """The `$ ` commands of the ```console blocks (indented ones too, as inside a list item), with their output."""
    found: list[Example] = []
    indent: str | None = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if indent is None:
            if stripped == "```console":
                indent = raw[: len(raw) - len(raw.lstrip())]
            continue
        if stripped == "```":
            indent = None
            continue
        text = raw[len(indent):] if raw.startswith(indent) else stripped
        if text.startswith("$ "):
            found.append(Example(path.name, number, text[2:].strip()))
        elif found and found[-1].line < number and text.strip():
            found[-1].shown.append(text)
    return found


def _normalised(text: str) -> str:
    # which side an audit's strongest event falls on is drawn too: `Z ≥ t: P[E|D'] vs P[E|D]` or `Z ≤ -t: P[E|D] ...`
    text = re.sub(r"Z [≤≥] ", "Z ≶ ", text).replace("P[E|D']", "P[E|D]")
    text = re.sub(r"\b[0-9a-f]{16,64}\b", "H", text)
    text = re.sub(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "N", text)
    return " ".join(text.split())


def shown_output_matches(shown: list[str], actual: str) -> str | None:
    """None when every shown line appears in the actual output, in order, modulo noise; else the first that does
    not."""
    haystack, position = _normalised(actual), 0
    for line in shown:
        if line.strip() == "…":
            continue
        needle = _normalised(line)
        found = haystack.find(needle, position)
        if found < 0:
            return line
        position = found + len(needle)
    return None


def bare(command: str) -> str:
    """The command without its trailing `# comment`."""
    return re.sub(r"\s+#\s.*$", "", command)


def expected_exit(example: Example) -> int | None:
    """The exit status the example shows: N for `# exit N`, None (any non-zero) for a shown error, else 0."""
    comment = EXIT_COMMENT.search(example.command)
    if comment:
        return int(comment.group(1))
    if any(line.startswith("dpcli: error:") for line in example.shown):
        return None
    return 0


def scratch_copy(tmp: Path) -> Path:
    for name in COPIED:
        shutil.copytree(ROOT / name, tmp / name)
    return tmp


def fill_todos(spec: Path, csv: str) -> None:
    """What the init example asks a person to do, from documentation: configs/example.yaml's columns and statistics,
    with `input:` relative to the spec's directory."""
    text = spec.read_text(encoding="utf-8")
    assert "TODO" in text, text  # what init printed needed filling in
    example = (ROOT / "configs" / "example.yaml").read_text(encoding="utf-8")
    data = os.path.relpath(spec.parent / csv, spec.parent)
    spec.write_text(example.replace("input: ../sample_data/people.csv", f"input: {data}"), encoding="utf-8")


def run(example: Example, cwd: Path) -> None:
    # one pass: the venv's own path may hold /tmp/
    places = {".venv/bin/": f"{VENV_BIN}/", "/tmp/": f"{cwd}/"}
    command = re.sub(r"(?<![\w./-])(\.venv/bin/|/tmp/)", lambda m: places[m.group(1)], example.command)
    if shutil.which("jq") is None:
        command = re.sub(r"\| jq '[^']*'", "| python -m json.tool > /dev/null", command)
    env = clean_env({"PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"})
    r = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    where = f"{example.document}:{example.line}: $ {example.command}"
    output = r.stdout + r.stderr
    status = expected_exit(example)
    if status is None:
        assert r.returncode != 0, f"{where}\nexpected a failure, got exit 0\n{output}"
    else:
        assert r.returncode == status, f"{where}\nexit {r.returncode}, expected {status}\n{output}"
    missing = shown_output_matches(example.shown, output)
    assert missing is None, f"{where}\nshown line not in the output: {missing!r}\noutput:\n{output}"
    init = INIT_THEN_FILL.match(example.command)
    if init:
        fill_todos(cwd / init.group(2), init.group(1))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_console_example_runs(document: Path, tmp_path: Path) -> None:
    cwd: Path | None = None  # copied at the first example that runs (most reference pages have none)
    ran = 0
    for example in examples(document):
        if bare(example.command) in NO_OP:
            continue
        if bare(example.command) in NOT_RUN or BENCHMARK.match(bare(example.command)):
            for word in bare(example.command).split():
                if "/" in word and not word.startswith("."):
                    assert (ROOT / word).exists(), f"{example.document}:{example.line}: {word} does not exist"
            continue
        cwd = cwd or scratch_copy(tmp_path)
        run(example, cwd)
        ran += 1
    print(f"{document.name}: {ran} example(s) ran and matched")


def test_no_command_outside_a_console_block() -> None:
    """A `$ ` line in a fence of another language would escape this test. docs/cli.md is exempt: it is every
    command's --help verbatim (scripts/gen_docs.py), whose epilogs show an example each
    (tests/cli/test_cli_polish.py)."""
    for document in DOCUMENTS:
        if document.name in GENERATED_HELP:
            continue
        fence = None
        for number, raw in enumerate(document.read_text(encoding="utf-8").splitlines(), 1):
            stripped = raw.strip()
            if stripped.startswith("```"):
                fence = None if fence is not None else stripped[3:]
            elif fence is not None and fence != "console":
                assert not stripped.startswith("$ "), f"{document.name}:{number}: a command in a ```{fence} block"


def test_the_documents_have_their_examples() -> None:
    """The extractor finds what a reader sees: without this, a broken parser would pass by running nothing."""
    readme = examples(ROOT / "README.md")
    quick = next(e for e in readme if "--output out.csv" in e.command)
    assert quick.shown[0].startswith("dpcli: released")
    tutorial = [bare(e.command) for e in examples(ROOT / "docs" / "tutorial.md")]
    assert len(tutorial) >= 8
    assert any(c.startswith("dpcli release configs/example.yaml --ledger ledger.jsonl --release-id") for c in tutorial)
    audit = [bare(e.command) for e in examples(ROOT / "docs" / "how-to-audit.md")]
    assert any(c.startswith("dpcli audit configs/example.yaml") for c in audit)
    ledger = [bare(e.command) for e in examples(ROOT / "docs" / "ledger.md")]
    assert any("--release-id 2026-11-23 -o again.csv" in c for c in ledger)  # the indented block is read too
    everywhere = {bare(e.command) for document in DOCUMENTS for e in examples(document)}
    assert set(NOT_RUN) | NO_OP <= everywhere  # every exemption names a command the documents still show
    assert BENCHMARK.match(".venv/bin/python bench/bench_persons.py --repeat 2")
    assert not BENCHMARK.match(".venv/bin/python bench/bench_persons.pyx")
    assert not BENCHMARK.match("dpcli plan bench/x.py")


def test_shown_output_matches_modulo_noise_only() -> None:
    actual = "dpcli: released 6 statistic(s) to out.csv\n  ledger L, record 3, head 0123456789abcdef\nstatistic,value\n"
    assert shown_output_matches(["dpcli: released 7 statistic(s) to out.csv", "…", "statistic,value"], actual) is None
    assert shown_output_matches(["  ledger L, record 1, head 5181c41d0402a134"], actual) is None
    assert shown_output_matches(["statistic,value", "dpcli: released"], actual) == "dpcli: released"  # order
    assert shown_output_matches(["statistic,sex,value"], actual) == "statistic,sex,value"  # a header is exact
    assert shown_output_matches(["dpcli: error: released"], actual) == "dpcli: error: released"


def test_the_tutorial_spec_uses_the_quick_starts_ledger(tmp_path: Path) -> None:
    """The tutorial's spec section's `ledger:` is the quick start's ledger, which holds the cap: copied beside
    configs/example.yaml, the spec releases with no --ledger against that cap, and no second ledger appears."""
    cwd = scratch_copy(tmp_path)
    text = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    spec = text.split("## The spec", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (cwd / "configs" / "readme.yaml").write_text(spec, encoding="utf-8")
    run(Example("tutorial.md", 0, "dpcli budget set people --epsilon 3 --ledger ledger.jsonl"), cwd)
    run(Example("tutorial.md", 0, "dpcli release configs/readme.yaml --quiet"), cwd)
    assert sorted(p.name for p in cwd.glob("**/*.jsonl")) == ["ledger.jsonl"]
    assert (cwd / "configs" / "out.csv").read_text(encoding="utf-8").startswith("statistic,")


# run in order by tests/run/test_randomize.py (a randomize spec is not a release spec; frequency.yaml reads its output)
RANDOMIZE_CONFIGS = ("randomize.yaml", "frequency.yaml")


@pytest.mark.parametrize(
    "config", sorted(p for p in (ROOT / "configs").glob("*.yaml") if p.name not in RANDOMIZE_CONFIGS),
    ids=lambda p: p.name,
)
def test_every_config_checks_plans_and_releases(config: Path, tmp_path: Path) -> None:
    """Each example in configs/ works as shipped, on the data it names (copied as the documents' examples are):
    `check` with its input, `plan`, and a real release against a cap with room for its ε and δ. In process (the
    documents' examples run the command itself)."""
    cwd = scratch_copy(tmp_path)
    spec = cwd / "configs" / config.name
    dataset = next(line.split(":", 1)[1].strip() for line in config.read_text(encoding="utf-8").splitlines()
                   if line.startswith("dataset:"))
    text = config.read_text(encoding="utf-8")
    period = ["--period", "1"] if "\nseries:" in text else []  # a series: one period
    command = "synth" if "\nsynth:" in text else "release"  # a synth spec is written by dpcli synth
    for args in (
        ["check", spec],
        ["plan", spec],
        ["budget", "set", dataset, "--epsilon", "10", "--delta", "1e-5", "--ledger", cwd / "ledger.jsonl"],
        [command, spec, *period, "--ledger", cwd / "ledger.jsonl", "--output", cwd / "out.csv", "--quiet"],
    ):
        r = run_in_process(*args, cwd=cwd)
        assert r.returncode == 0, (args[0], r.stderr.decode())
    table = (cwd / "out.csv").read_text(encoding="utf-8").splitlines()
    header = "age,hours_per_week" if command == "synth" else "statistic,"
    assert table[0].startswith(header), table[:3]
    assert len(table) > 1, table[:3]


# Every Markdown file of the repository that a reader follows links from (not the venv's or the build's)
LINKED_DOCUMENTS = sorted(
    p for p in ROOT.rglob("*.md")
    if not {".venv", ".git", "build", "dist", "node_modules"} & set(p.relative_to(ROOT).parts)
    and not any(part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)
)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation but `-` and `_` dropped, spaces to
    hyphens, a repeated one suffixed -1, -2, ...; headings inside code fences are not headings."""
    found: set[str] = set()
    fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            fence = not fence
        heading = re.match(r"#{1,6} (.*)", line) if not fence else None
        if heading:
            anchor = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            n, unique = 0, anchor
            while unique in found:
                n += 1
                unique = f"{anchor}-{n}"
            found.add(unique)
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of the inline links outside code fences and code spans."""
    out, fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out += [(number, m.group(1)) for m in LINK.finditer(re.sub(r"`[^`]*`", "", line))]
    return out


def test_every_relative_link_reaches_its_file_and_heading() -> None:
    assert ROOT / "README.md" in LINKED_DOCUMENTS
    assert ROOT / "docs" / "spec.md" in LINKED_DOCUMENTS
    broken = []
    for document in LINKED_DOCUMENTS:
        for number, target in links(document):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...: not checked here (no network)
                continue
            path, _, anchor = target.partition("#")
            resolved = (document.parent / path).resolve() if path else document
            where = f"{document.relative_to(ROOT)}:{number}: {target}"
            if not resolved.exists():
                broken.append(f"{where}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in headings(resolved):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n## The spec: v1\n```\n# not a heading\n```\n## Top\n", encoding="utf-8")
    assert headings(tmp_path / "a.md") == {"top", "the-spec-v1", "top-1"}
    (tmp_path / "b.md").write_text("[x](a.md#top-1) `[y](nowhere.md)`\n```\n[z](gone.md)\n```\n[w](c.md)\n")
    assert links(tmp_path / "b.md") == [(1, "a.md#top-1"), (5, "c.md")]
