"""examples/ runs: the cron script, the GitHub Actions workflow and the GitLab CI job each publish a release with its
report and summary, as their platform would run them.

Each test copies examples/ and tests/data/ into a scratch directory (the checkout a runner would have), sets the
dataset's cap as the operator does once, and runs the example's own commands with this test's venv first on PATH:
- the workflow's `run:` steps in order, each in its own `bash -eo pipefail` (as GitHub runs them), with `${{ … }}`
  expressions replaced from a table below (an expression that is not in it fails the test); `uses:` steps are the
  platform's (checkout, setup-python, upload-artifact: the paths it uploads must exist);
- the GitLab job's `script:` lines in one `bash -e` shell (as GitLab's runner does), with its CI variables set;
- the cron script as cron would run it.
The step that installs dpcli (`pip install 'dpcli…'`: GitHub's "Install dpcli" step, GitLab's `before_script`) is the
one thing not run: this suite runs in the venv dpcli is installed in.

Each test then runs the same job again under the same run id (a re-run spends nothing and writes the same table) and
under a new one (it spends again), reading the spends from `dpcli budget show --json`.

Marked slow (about 25 s of real releases and reports): `make test-slow` runs them, and so does CI (.ci/run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from tests.helpers import clean_env

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
VENV_BIN = Path(sys.executable).parent
DATASET = "adult"
RELEASE_EPSILON = Fraction(1, 2)  # examples/release.yaml's privacy.epsilon

pytestmark = pytest.mark.slow

EXPRESSION = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A runner's checkout (examples/, tests/data/) and a ledger with the dataset's cap set, as the operator does."""
    work = tmp_path / "checkout"
    shutil.copytree(EXAMPLES, work / "examples")
    shutil.copytree(ROOT / "tests" / "data", work / "tests" / "data")
    ledger = tmp_path / "ledger.jsonl"
    _dpcli("budget", "set", DATASET, "--epsilon", "10", "--ledger", ledger, cwd=work)
    return work, ledger


def _env(**extra: str) -> dict[str, str]:
    return clean_env({"PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", **extra})


def _dpcli(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(["dpcli", *map(str, args)], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _spent(ledger: Path, cwd: Path) -> tuple[Fraction, int]:
    (status,) = [s for s in json.loads(_dpcli("budget", "show", "--ledger", ledger, "--json", cwd=cwd).stdout)
                 if s["dataset"] == DATASET]
    return Fraction(status["spent"]), status["releases"]


def _bash(script: str, cwd: Path, env: dict[str, str], flags: str = "-eo pipefail") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *flags.split(), "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _is_install(command: str) -> bool:
    return bool(re.fullmatch(r"python -m pip install 'dpcli\[postgres\]==[0-9.*]+'", command.strip()))


def _published(work: Path, table: str = "published/table.csv") -> None:
    """A table with the contract's header, its sidecar and a self-contained HTML report."""
    header = (work / table).read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[0] == "statistic"
    assert {"value", "ci_low", "ci_high", "epsilon"} <= set(header)
    meta = json.loads((work / f"{table}.meta.json").read_text(encoding="utf-8"))
    assert meta["dataset"] == DATASET
    html = (work / "published" / "report.html").read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html")
    assert "<svg" in html


# -- GitHub Actions ---------------------------------------------------------------------------------------------------


def _github_job(work: Path, ledger: Path, run_id: str, summary: Path) -> list[subprocess.CompletedProcess]:
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
    env = _env(GITHUB_STEP_SUMMARY=str(summary), GITHUB_RUN_ID=run_id, **job_env)
    done, uploads, installs = [], [], 0
    for step in job["steps"]:
        if "uses" in step:
            if step["uses"].startswith("actions/upload-artifact@"):
                uploads += step["with"]["path"].split()
            continue
        if step.get("name", "").startswith("Install"):
            assert _is_install(step["run"]), step["run"]
            installs += 1
            continue
        step_env = {k: expand(str(v)) for k, v in step.get("env", {}).items()}
        result = _bash(expand(step["run"]), work, {**env, **step_env})
        assert result.returncode == 0, (step.get("name"), result.stderr)
        done.append(result)
    assert installs == 1
    assert uploads, uploads
    assert all((work / p).is_file() for p in uploads), uploads
    return done


def test_the_github_actions_workflow_publishes_a_release_its_report_and_a_step_summary(tmp_path: Path) -> None:
    work, ledger = _checkout(tmp_path)
    summary = tmp_path / "step_summary.md"
    summary.write_text("## an earlier step's summary\n", encoding="utf-8")

    _github_job(work, ledger, "4711", summary)
    _published(work)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## an earlier step's summary\n"), "the step summary is appended to, not replaced"
    assert len(text) > len("## an earlier step's summary\n") + 40
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)
    table = (work / "published" / "table.csv").read_bytes()

    # "Re-run failed jobs": the same run id writes the paid table again and spends nothing
    _github_job(work, ledger, "4711", summary)
    assert (work / "published" / "table.csv").read_bytes() == table
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)

    # the next scheduled run spends again
    _github_job(work, ledger, "4712", summary)
    assert _spent(ledger, work) == (2 * RELEASE_EPSILON, 2)


# -- GitLab CI --------------------------------------------------------------------------------------------------------


def _gitlab_job(work: Path, ledger: Path, pipeline_id: str) -> subprocess.CompletedProcess:
    (job,) = yaml.safe_load((work / "examples" / "gitlab-ci" / ".gitlab-ci.yml").read_text()).values()
    assert [_is_install(c) for c in job["before_script"]] == [True]
    env = _env(DPCLI_LEDGER=str(ledger), CI_PIPELINE_ID=pipeline_id, CI_PIPELINE_SOURCE="schedule", CI="true")
    result = _bash("\n".join(job["script"]), work, env, flags="-e")
    assert result.returncode == 0, result.stderr
    assert all((work / p).exists() for p in job["artifacts"]["paths"])
    return result


def test_the_gitlab_ci_job_publishes_a_release_its_report_and_prints_the_summary(tmp_path: Path) -> None:
    work, ledger = _checkout(tmp_path)
    result = _gitlab_job(work, ledger, "901")
    _published(work)
    summary = (work / "published" / "summary.md").read_text(encoding="utf-8")
    assert summary.strip()
    assert summary in result.stdout  # `cat published/summary.md` puts it in the job log
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)

    _gitlab_job(work, ledger, "901")  # a retried job
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)
    _gitlab_job(work, ledger, "902")
    assert _spent(ledger, work) == (2 * RELEASE_EPSILON, 2)


# -- cron -------------------------------------------------------------------------------------------------------------


def test_the_cron_script_publishes_once_a_day_and_stops_with_exit_4_when_the_cap_is_used_up(tmp_path: Path) -> None:
    work, ledger = _checkout(tmp_path)
    script = work / "examples" / "cron" / "publish-release.sh"
    crontab = [line for line in script.read_text().splitlines() if re.match(r"#\s+\d+ \d+ \* \* \* ", line)]
    assert len(crontab) == 1
    assert "examples/cron/publish-release.sh" in crontab[0]

    def day(date: str) -> subprocess.CompletedProcess:
        # cron's environment: a short PATH (here with the venv's bin) and the variables the crontab line sets
        env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "DPCLI_LEDGER": str(ledger), "DAY": date}
        return subprocess.run([str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=300)

    first = day("2026-11-23")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "published published/2026-11-23 (release id 2026-11-23)\n"
    for name in ("table.csv", "table.csv.meta.json", "report.html", "summary.md"):
        assert (work / "published" / "2026-11-23" / name).is_file(), name
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)

    assert day("2026-11-23").returncode == 0  # a second run on the same day spends nothing
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)

    # the cap lowered to what is spent: the next day's run is refused before anything is spent or written
    _dpcli("budget", "set", DATASET, "--epsilon", str(RELEASE_EPSILON), "--ledger", ledger, cwd=work)
    refused = day("2026-11-24")
    assert refused.returncode == 4
    assert "budget refused: the cap of this dataset is used up; nothing was spent" in refused.stderr
    assert not (work / "published" / "2026-11-24" / "table.csv").exists()
    assert _spent(ledger, work) == (RELEASE_EPSILON, 1)
