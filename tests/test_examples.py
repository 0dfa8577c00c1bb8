"""examples/ runs: the cron script, the GitHub Actions workflow and the GitLab CI job each install dpcli and publish
a release with its report and summary, as their platform would run them.

Each test copies examples/ and tests/data/ into a scratch directory (the checkout a runner would have), sets the
dataset's cap as the operator does once (with this test's dpcli), and runs the example's own commands:
- the workflow's `run:` steps in order, each in its own `bash -eo pipefail` (as GitHub runs them), with `${{ … }}`
  expressions replaced from a table below (an expression that is not in it fails the test); `uses:` steps are the
  platform's (checkout, upload-artifact: the paths it uploads must exist), and setup-python's Python is a clean venv
  (`python -m venv`) first on PATH, with this test's venv taken off PATH. Its "Install dpcli" step runs too: pip
  installs dpcli from a git URL at the release's tag, served by a local repository (file://) holding this tree's
  tracked files, committed and tagged, in place of the remote one;
- the GitLab job's `before_script:` and `script:` lines in one `bash -e` shell (as GitLab's runner does), with its
  CI variables set, in a clean venv the same way; the wheel its `before_script` installs is the one `make wheel`
  builds from this tree, put where the job's `DPCLI_WHEEL` says;
- the cron script from its own crontab line, run by `/bin/sh` under `env -i` with cron's few variables only
  (PATH=/usr/bin:/bin, SHELL, HOME, LOGNAME): the line's paths (/srv/stats) point at the scratch directory, whose
  `.venv/bin` is this test's venv bin.
pip fetches dpcli's dependencies as `make venv` does (the index, or pip's cache).

Each test then runs the same job again under the same run id (a re-run spends nothing and writes the same table) and
under a new one (it spends again), reading the spends from `dpcli budget show --json`. A re-run of a CI job reuses
the venv of the first (its install step is not repeated: it would only cost another half a minute).

Marked slow (two clean installs of dpcli and its dependencies, about 40 s each, and real releases and reports):
`make test-slow` runs them, and so does CI (.ci/run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import date, timedelta
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from dpcli import __version__
from tests.helpers import clean_env

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
VENV_BIN = Path(sys.executable).parent
DATASET = "adult"
RELEASE_EPSILON = Fraction(1, 2)  # examples/release.yaml's privacy.epsilon
TAG = f"v{__version__}"
WHEEL = f"dpcli-{__version__}-py3-none-any.whl"

pytestmark = pytest.mark.slow

EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")
TIMESTAMPED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def _checkout(work: Path, ledger: Path) -> Path:
    """A runner's checkout (examples/, tests/data/) and a ledger with the dataset's cap set, as the operator does."""
    shutil.copytree(EXAMPLES, work / "examples")
    shutil.copytree(ROOT / "tests" / "data", work / "tests" / "data")
    _dpcli("budget", "set", DATASET, "--epsilon", "10", "--ledger", ledger, cwd=work)
    return ledger


def _env(**extra: str) -> dict[str, str]:
    return clean_env({"PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", **extra})


def _dpcli(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(["dpcli", *map(str, args)], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _spent(ledger: Path, cwd: Path, dataset: str = DATASET) -> tuple[Fraction, int]:
    (status,) = [s for s in json.loads(_dpcli("budget", "show", "--ledger", ledger, "--json", cwd=cwd).stdout)
                 if s["dataset"] == dataset]
    return Fraction(status["spent"]), status["releases"]


def _bash(script: str, cwd: Path, env: dict[str, str], flags: str = "-eo pipefail") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *flags.split(), "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _venv_env(venv: Path) -> dict[str, str]:
    """The environment of a job whose Python is ``venv``: its bin first on PATH, and neither this test's venv nor
    anything that would import dpcli from this tree."""
    others = [p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p).resolve() != VENV_BIN.resolve()]
    env = clean_env({"PATH": os.pathsep.join([str(venv / "bin"), *others])})
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH"):
        env.pop(name, None)
    return env


def _clean_venv(path: Path) -> dict[str, str]:
    """A new venv, as setup-python or a `python:` image gives a job, and the environment of a job that runs in it."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return _venv_env(path)


def _installed_from(venv: Path, env: dict[str, str], cwd: Path) -> str:
    """The `dpcli` the job's PATH finds is the venv's, and the package it runs is installed there (not this tree)."""
    found = _bash("command -v dpcli", cwd, env)
    assert found.stdout.strip() == str(venv / "bin" / "dpcli"), found
    where = _bash("python -c 'import dpcli; print(dpcli.__file__)'", cwd, env)
    assert where.stdout.strip().startswith(str(venv)), where
    direct_url = _bash("python -c 'from importlib.metadata import distribution as d; "
                       "print(d(\"dpcli\").read_text(\"direct_url.json\"))'", cwd, env)
    return direct_url.stdout


def _git_url_at_tag(tmp: Path) -> str:
    """The git URL a user installs from, at the release's tag: this tree's tracked files as they are on disk,
    committed and tagged in a fresh local repository, served as file:// in place of the remote."""
    repo = tmp / "dpcli-repository"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.split(b"\0")):
        source, target = ROOT / os.fsdecode(name), repo / os.fsdecode(name)
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git = ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.invalid",
           "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "init.defaultBranch=main"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the tree under test"], ["tag", TAG]):
        subprocess.run([*git, *command], check=True, capture_output=True, timeout=120)
    # file://localhost/...: the older pip of a new venv refuses a `name @ git+file:///...` URL with no host
    return f"git+file://localhost{repo.as_posix()}@{TAG}"


def _make_wheel(dist: Path) -> Path:
    """`make wheel` (README.md, Install), into ``dist``."""
    subprocess.run(["make", "--no-print-directory", "wheel", f"DIST={dist}", f"PYTHON={sys.executable}"], cwd=ROOT,
                   check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("dpcli-*.whl")
    assert wheel.name == WHEEL
    return wheel


def _published(work: Path, table: str = "published/table.csv", report: str = "published/report.html") -> None:
    """A table with the contract's header, its sidecar and a self-contained HTML report."""
    header = (work / table).read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[0] == "statistic"
    assert {"value", "ci_low", "ci_high", "epsilon"} <= set(header)
    meta = json.loads((work / f"{table}.meta.json").read_text(encoding="utf-8"))
    assert meta["dataset"] == DATASET
    html = (work / report).read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html")
    assert "<svg" in html


# -- GitHub Actions ---------------------------------------------------------------------------------------------------


def _github_job(work: Path, ledger: Path, run_id: str, summary: Path, venv: Path, git_url: str | None
                ) -> list[subprocess.CompletedProcess]:
    """One run of the workflow's job; ``git_url`` set: a fresh runner (``venv`` new), whose install step installs
    dpcli from it; None: a re-run in the same venv, the install step left out."""
    workflow = yaml.safe_load((work / "examples" / "github-actions" / "publish-release.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    assert "schedule" in triggers
    assert "workflow_dispatch" in triggers
    (job,) = workflow["jobs"].values()
    values = {"secrets.DPCLI_LEDGER": str(ledger), "github.run_id": run_id}

    def expand(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            assert m.group(1) in values, f"the test does not know the expression {m.group(0)}"
            return values[m.group(1)]

        return EXPRESSION.sub(one, text)

    job_env = {k: expand(str(v)) for k, v in job.get("env", {}).items()}
    # the source is a git URL pinned to this version's tag (never a name on an index); the test serves it locally
    assert re.fullmatch(rf"git\+https://\S+\.git@{re.escape(TAG)}", job_env["DPCLI_GIT"]), job_env["DPCLI_GIT"]
    if git_url is not None:
        job_env["DPCLI_GIT"] = git_url
    base = _clean_venv(venv) if git_url is not None else None
    env = {**(base or _venv_env(venv)), "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_RUN_ID": run_id, **job_env}
    done, uploads, installs = [], [], 0
    for step in job["steps"]:
        if "uses" in step:
            if step["uses"].startswith("actions/upload-artifact@"):
                uploads += step["with"]["path"].split()
            continue
        is_install = step.get("name", "") == "Install dpcli"
        installs += is_install
        if is_install:
            assert re.search(r"pip install \S*dpcli\[postgres\] @ \$DPCLI_GIT", step["run"]), step["run"]
            if git_url is None:
                continue
        step_env = {k: expand(str(v)) for k, v in step.get("env", {}).items()}
        result = _bash(expand(step["run"]), work, {**env, **step_env})
        assert result.returncode == 0, (step.get("name"), result.stderr)
        if is_install:
            assert json.loads(_installed_from(venv, env, work))["vcs_info"]["requested_revision"] == TAG
        done.append(result)
    assert installs == 1
    assert uploads, uploads
    assert all((work / p).is_file() for p in uploads), uploads
    return done


def test_the_github_actions_workflow_installs_dpcli_and_publishes_a_release_its_report_and_a_step_summary(
    tmp_path: Path,
) -> None:
    work = tmp_path / "checkout"
    ledger = _checkout(work, tmp_path / "ledger.jsonl")
    venv = tmp_path / "runner-python"
    summary = tmp_path / "step_summary.md"
    summary.write_text("## an earlier step's summary\n", encoding="utf-8")

    _github_job(work, ledger, "4711", summary, venv, _git_url_at_tag(tmp_path))
    _published(work)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## an earlier step's summary\n"), "the step summary is appended to, not replaced"
    assert len(text) > len("## an earlier step's summary\n") + 40
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)
    table = (work / "published" / "table.csv").read_bytes()

    # "Re-run failed jobs": the same run id writes the paid table again and spends nothing
    _github_job(work, ledger, "4711", summary, venv, None)
    assert (work / "published" / "table.csv").read_bytes() == table
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)

    # the next scheduled run spends again
    _github_job(work, ledger, "4712", summary, venv, None)
    assert _spent(ledger, work) == (2 * RELEASE_EPSILON, 2)


# -- GitLab CI --------------------------------------------------------------------------------------------------------


def _gitlab_job(work: Path, ledger: Path, pipeline_id: str, venv: Path, install: bool) -> subprocess.CompletedProcess:
    """One run of the job; ``install``: a fresh container (``venv`` new) whose before_script installs the wheel the
    job names; otherwise a retry in the same venv, before_script left out."""
    (job,) = yaml.safe_load((work / "examples" / "gitlab-ci" / ".gitlab-ci.yml").read_text()).values()
    variables = {k: str(v) for k, v in job["variables"].items()}
    assert variables["DPCLI_WHEEL"] == f"wheels/{WHEEL}"  # the wheel `make wheel` builds for this version
    (install_line,) = job["before_script"]
    assert re.search(r"pip install \"\$\{DPCLI_WHEEL\}\[postgres\]\"", install_line), install_line
    base = _clean_venv(venv) if install else _venv_env(venv)
    env = {**base, **variables, "DPCLI_LEDGER": str(ledger), "CI_PIPELINE_ID": pipeline_id,
           "CI_PIPELINE_SOURCE": "schedule", "CI": "true"}
    lines = [*(job["before_script"] if install else []), *job["script"]]
    result = _bash("\n".join(lines), work, env, flags="-e")
    assert result.returncode == 0, result.stderr
    if install:
        assert json.loads(_installed_from(venv, env, work))["url"].endswith(f"/wheels/{WHEEL}")
    assert all((work / p).exists() for p in job["artifacts"]["paths"])
    return result


def test_the_gitlab_ci_job_installs_the_wheel_and_publishes_a_release_its_report_and_prints_the_summary(
    tmp_path: Path,
) -> None:
    work = tmp_path / "checkout"
    ledger = _checkout(work, tmp_path / "ledger.jsonl")
    (work / "wheels").mkdir()
    shutil.copy2(_make_wheel(tmp_path / "dist"), work / "wheels" / WHEEL)
    venv = tmp_path / "job-python"

    result = _gitlab_job(work, ledger, "901", venv, install=True)
    _published(work)
    summary = (work / "published" / "summary.md").read_text(encoding="utf-8")
    assert summary.strip()
    assert summary in result.stdout  # `cat published/summary.md` puts it in the job log
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)

    _gitlab_job(work, ledger, "901", venv, install=False)  # a retried job
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)
    _gitlab_job(work, ledger, "902", venv, install=False)
    assert _spent(ledger, work) == (2 * RELEASE_EPSILON, 2)


# -- cron -------------------------------------------------------------------------------------------------------------

CRON_HOME = "/srv/stats"  # the crontab line's folder: the checkout, its .venv, the ledger and the log


def _crontab_line(name: str = "publish-release.sh") -> str:
    """The command of the crontab line in the cron script's header (after the five time fields)."""
    script = (EXAMPLES / "cron" / name).read_text(encoding="utf-8")
    (line,) = [m.group(1) for m in re.finditer(r"^#\s+\d+ \d+ \* \* \*\s+(.+)$", script, re.MULTILINE)]
    assert f"examples/cron/{name}" in line
    return line


def _cron(home: Path, *extra: str, script: str = "publish-release.sh") -> subprocess.CompletedProcess:
    """The crontab line as cron runs it: `/bin/sh -c LINE` with cron's own variables only, its paths under
    ``home`` and its log at ``home``/dpcli.log wherever the line puts it; ``extra`` variables (NAME=value) go before
    the line's own, for a run on another day."""
    command = _crontab_line(script).replace(CRON_HOME, str(home))
    command, redirects = re.subn(r">>\s*\S+", f">>{home / 'dpcli.log'}", command)
    assert redirects == 1, "the line appends its output to one log file"
    cron_env = ["PATH=/usr/bin:/bin", "SHELL=/bin/sh", f"HOME={home}", "LOGNAME=dpcli"]
    return subprocess.run(["env", "-i", *cron_env, *extra, "/bin/sh", "-c", command], cwd="/", capture_output=True,
                          text=True, timeout=300)


def _cron_home(tmp_path: Path, with_venv: bool) -> tuple[Path, Path]:
    home = tmp_path / "srv-stats"
    home.mkdir()
    ledger = _checkout(home, home / "ledger.jsonl")
    if with_venv:  # the venv README.md's Install makes, at /srv/stats/.venv: here, this test's
        (home / ".venv").mkdir()
        (home / ".venv" / "bin").symlink_to(VENV_BIN, target_is_directory=True)
    return home, ledger


def _log(home: Path) -> list[str]:
    lines = (home / "dpcli.log").read_text(encoding="utf-8").splitlines()
    assert lines
    assert all(TIMESTAMPED.match(line) for line in lines), lines
    return lines


def _folders(published: Path) -> list[str]:
    return sorted(p.name for p in published.iterdir()) if published.exists() else []


def test_the_crontab_line_publishes_once_a_day_with_a_timestamped_log_and_stops_with_exit_4_at_the_cap(
    tmp_path: Path,
) -> None:
    assert _crontab_line().startswith(f"cd {CRON_HOME} && ")
    home, ledger = _cron_home(tmp_path, with_venv=True)
    published = home / "published"

    first = _cron(home)  # verbatim: today's date is the release id
    assert first.returncode == 0, (home / "dpcli.log").read_text(encoding="utf-8")
    (today,) = _folders(published)
    date.fromisoformat(today)
    for name in ("table.csv", "table.csv.meta.json", "report.html", "summary.md"):
        assert (published / today / name).is_file(), name
    _published(home, f"published/{today}/table.csv", f"published/{today}/report.html")
    assert _spent(ledger, home) == (RELEASE_EPSILON, 1)
    log = "\n".join(_log(home))
    # what the paying run spent, and the ledger record that holds it
    assert re.search(r"spent (ε|eps)=0\.5\b", log), log
    assert re.search(r"record 1\b", log), log
    assert f"published published/{today} (release id {today})" in log
    table = (published / today / "table.csv").read_bytes()

    # a second run on the same day spends nothing, and leaves each file once: the summary is not appended again
    again = _cron(home, f"DAY={today}")
    assert again.returncode == 0, _log(home)
    assert _folders(published) == [today]
    summary = (published / today / "summary.md").read_text(encoding="utf-8")
    heading = summary.splitlines()[0]
    assert summary.splitlines().count(heading) == 1, summary
    assert (published / today / "table.csv").read_bytes() == table
    assert _spent(ledger, home) == (RELEASE_EPSILON, 1)
    assert any(re.search(r"record 1\b", line) for line in _log(home)[len(log.splitlines()):]), _log(home)

    # the cap lowered to what is spent: the next day's run is refused before anything is spent or written
    _dpcli("budget", "set", DATASET, "--epsilon", str(RELEASE_EPSILON), "--ledger", ledger, cwd=home)
    next_day = (date.fromisoformat(today) + timedelta(days=1)).isoformat()
    refused = _cron(home, f"DAY={next_day}")
    assert refused.returncode == 4
    assert _log(home)[-1].endswith("budget refused: the cap of this dataset is used up; nothing was spent")
    assert _folders(published) == [today], "a refused run leaves no folder, hidden or dated"
    assert _spent(ledger, home) == (RELEASE_EPSILON, 1)


def test_the_crontab_line_without_dpcli_on_its_path_spends_nothing_and_leaves_no_folder(tmp_path: Path) -> None:
    home, ledger = _cron_home(tmp_path, with_venv=False)  # /srv/stats/.venv missing: a wrong path on the line
    missing = _cron(home)
    assert missing.returncode == 127
    assert _spent(ledger, home) == (0, 0)
    assert _folders(home / "published") == [], "no folder, dated or hidden, is left"
    (line,) = _log(home)
    assert "dpcli is not on PATH" in line


def test_the_series_crontab_line_publishes_a_day_a_run_and_charges_the_series_once(tmp_path: Path) -> None:
    """examples/cron/publish-series.sh: the day is the release id, dpcli derives its period; the first day charges
    the series, later days and re-runs spend nothing; the report draws the days released so far; a day not ended
    (or past the horizon) is exit 2 with no folder."""
    assert _crontab_line("publish-series.sh").startswith(f"cd {CRON_HOME} && ")
    home, ledger = _cron_home(tmp_path, with_venv=True)
    for folder, name in (("configs", "series.yaml"), ("sample_data", "admissions.csv")):
        (home / folder).mkdir()
        shutil.copy(ROOT / folder / name, home / folder / name)
    _dpcli("budget", "set", "admissions", "--epsilon", "3", "--ledger", ledger, cwd=home)
    published = home / "published-series"

    first = _cron(home, "DAY=2026-01-04", script="publish-series.sh")
    assert first.returncode == 0, (home / "dpcli.log").read_text(encoding="utf-8")
    log = "\n".join(_log(home))
    assert "released period 4 of 365 of a series" in log
    assert re.search(r"charged the series (ε|eps)=1, once for all its periods", log), log
    assert "published published-series/2026-01-04 (release id 2026-01-04)" in log
    assert _spent(ledger, home, "admissions") == (1, 1)

    second = _cron(home, "DAY=2026-01-05", script="publish-series.sh")
    assert second.returncode == 0, _log(home)
    assert _folders(published) == ["2026-01-04", "2026-01-05"]
    day = published / "2026-01-05"
    for name in ("table.csv", "table.csv.meta.json", "report.html", "summary.md"):
        assert (day / name).is_file(), name
    assert re.search(r"spent nothing: the series was charged by ledger record \d+", "\n".join(_log(home)))
    assert _spent(ledger, home, "admissions") == (1, 1)
    page = (day / "report.html").read_text(encoding="utf-8")
    assert "period 5 of 365" in page
    assert "2 of 365 periods are released (4-5)" in page
    assert "<figure class='plot time'" in page
    assert "series period 5 of 365" in (day / "summary.md").read_text(encoding="utf-8")
    table = (day / "table.csv").read_bytes()

    again = _cron(home, "DAY=2026-01-05", script="publish-series.sh")  # a retry: the frozen day, nothing spent
    assert again.returncode == 0, _log(home)
    assert (day / "table.csv").read_bytes() == table
    assert _spent(ledger, home, "admissions") == (1, 1)

    tomorrow = (date.today() + timedelta(days=1)).isoformat()  # not ended (or, after 2026, past the horizon)
    refused = _cron(home, f"DAY={tomorrow}", script="publish-series.sh")
    assert refused.returncode == 2
    assert "nothing was spent" in _log(home)[-1]
    assert _folders(published) == ["2026-01-04", "2026-01-05"], "a refused run leaves no folder, hidden or dated"


# -- README.md, Install -----------------------------------------------------------------------------------------------


def _install_blocks() -> list[list[str]]:
    """The commands of the ```console blocks of README.md's Install section, block by block."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```console\n(.*?)```", section, re.DOTALL)
    return [[line[2:] for line in block.splitlines() if line.startswith("$ ")] for block in blocks]


def test_the_readme_installs_dpcli_from_a_clone_a_git_url_at_the_tag_and_a_wheel(tmp_path: Path) -> None:
    """README.md's Install, as a reader runs it: from a clone, from the git URL at the tag, from `make wheel`'s wheel
    (in the clone the first block made). Each later block installs into the venv of the first, dpcli uninstalled
    from it first, so only the first fetches the dependencies (the CI examples' tests install from a git URL and a
    wheel into new venvs). `URL` is a local repository holding this tree, tagged."""
    clone_block, git_block, wheel_block = _install_blocks()
    git_url = _git_url_at_tag(tmp_path)  # git+file://localhost/PATH@TAG
    repository = git_url.removeprefix("git+file://localhost").removesuffix(f"@{TAG}")
    env = _venv_env(tmp_path / "no-venv-yet")  # the machine's python3, not this test's venv

    def run(block: list[str], cwd: Path) -> None:
        script = "\n".join(line.replace("git+URL", f"git+file://localhost{repository}").replace("URL", repository)
                           for line in block)
        done = _bash(script, cwd, env)
        assert done.returncode == 0, (script, done.stderr[-3000:])

    def installed(clone: Path) -> dict:
        found = _installed_from(clone / ".venv", _venv_env(clone / ".venv"), tmp_path)
        return json.loads(found)

    def uninstall(clone: Path) -> None:
        done = _bash(".venv/bin/python -m pip uninstall --yes --quiet dpcli", clone, env)
        assert done.returncode == 0, done.stderr

    run(clone_block, tmp_path)
    clone = tmp_path / "dpcli"
    assert subprocess.run(["git", "describe", "--tags", "--exact-match"], cwd=clone, capture_output=True,
                          text=True).stdout.strip() == TAG
    assert installed(clone)["url"] == clone.as_uri()

    assert TAG in "\n".join(git_block)
    uninstall(clone)
    run(git_block, clone)
    assert installed(clone)["vcs_info"]["requested_revision"] == TAG

    assert WHEEL in "\n".join(wheel_block)
    uninstall(clone)
    run(wheel_block, clone)
    assert installed(clone)["url"] == (clone / "dist" / WHEEL).as_uri()
    version = _bash("dpcli --version", tmp_path, _venv_env(clone / ".venv"))
    assert __version__ in version.stdout
