"""Issue 9: everything that can be refused is refused before the spend; the stdin spool never outlives the run;
signals and usage errors are one line with the contract's code.

Output targets run through the library (``release()``, fast) and once through the real command; spool, signal and
message tests run the real `dpcli` in a subprocess.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcli.errors import UsageError
from dpcli.run.release import release
from tests.helpers import clean_env, mounted_tmpfs, run_dpcli, run_in_process

DATA = b"age\n34\n71\n15\n52\n"


def ledger_state(work: Path) -> tuple[bytes, bytes]:
    return (work / "L.jsonl").read_bytes(), (work / "L.jsonl.head").read_bytes()


def one_line_error(r: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    err = r.stderr.decode()
    assert r.returncode == code, (r.returncode, err)
    assert err.startswith("dpcli: error: "), err
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err
    return err


# -- the output target, before the spend ---------------------------------------------------------------------------


def _targets(work: Path) -> dict[str, tuple[str, str]]:
    """name -> (the --output text, a words of the refusal)."""
    (work / "adir").mkdir()
    os.mkfifo(work / "fifo")
    (work / "L.jsonl.releases").mkdir(exist_ok=True)
    os.link(work / "L.jsonl.head", work / "head-link")
    (work / "x.csv.meta.json").mkdir()  # the sidecar's name is taken by a directory
    return {
        "empty": ("", "empty name"),
        "dot": (".", "names a directory"),
        "trailing slash, existing": (f"{work}/adir/", "names a directory"),
        "trailing slash, new": (f"{work}/newdir/", "names a directory"),
        "directory": (f"{work}/adir", "is a directory"),
        "device": ("/dev/null", "not a regular file"),
        "fifo": (f"{work}/fifo", "not a regular file"),
        "the spec": (f"{work}/spec.yaml", "is the spec"),
        "the input": (f"{work}/data.csv", "is the input file"),
        "the ledger": (f"{work}/L.jsonl", "is the ledger"),
        "the head": (f"{work}/L.jsonl.head", "a file of the ledger"),
        "the staged head": (f"{work}/L.jsonl.head.new", "a file of the ledger"),
        "the release store": (f"{work}/L.jsonl.releases", "is a directory"),
        "inside the release store": (f"{work}/L.jsonl.releases/t.csv", "inside the ledger's release store"),
        "a hard link to the head": (f"{work}/head-link", "a file of the ledger"),
        "a sidecar that would replace a directory": (f"{work}/x.csv", "sidecar"),
    }


def test_every_bad_output_target_is_refused_before_the_spend(work: Path) -> None:
    targets = _targets(work)
    before = ledger_state(work)
    listing = sorted(p.name for p in work.iterdir())
    for name, (text, words) in targets.items():
        with pytest.raises(UsageError) as caught:
            release(work / "spec.yaml", input=work / "data.csv", output=text, ledger=work / "L.jsonl")
        assert words in str(caught.value), (name, str(caught.value))
    assert ledger_state(work) == before  # nothing spent
    assert sorted(p.name for p in work.iterdir()) == listing  # nothing created (no `newdir` file, no temp file)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert stat.S_ISFIFO(os.stat(work / "fifo").st_mode)


def test_a_refused_output_is_one_line_exit_2_through_the_command(work: Path) -> None:
    (work / "adir").mkdir()
    r = run_dpcli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "adir", "--ledger",
                  work / "L.jsonl")
    one_line_error(r, 2, "is a directory")
    r = run_dpcli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", "newdir/", "--ledger",
                  work / "L.jsonl", cwd=work)
    one_line_error(r, 2, "names a directory")
    assert not (work / "newdir").exists()


def test_a_good_output_still_works_and_replaces_an_older_file(work: Path) -> None:
    (work / "o.csv").write_text("old\n")
    release(work / "spec.yaml", input=work / "data.csv", output=work / "o.csv", ledger=work / "L.jsonl")
    assert (work / "o.csv").read_text().startswith("statistic,")


# -- every file a run writes: the same checks, before the spend (issue 23, finding 9) ------------------------------


def _bad_targets(work: Path) -> dict[str, tuple[Path, int]]:
    """name -> (a file name no run may write, the exit code of the refusal). out.csv is this release's table (and
    out.csv.meta.json its sidecar), which the other targets must not be."""
    (work / "out.csv").write_text("statistic,value\n")
    (work / "out.csv.meta.json").write_text("{}\n")
    (work / "adir").mkdir()
    os.mkfifo(work / "fifo")
    (work / "L.jsonl.releases").mkdir(exist_ok=True)
    (work / "to-ledger").symlink_to(work / "L.jsonl")
    (work / "to-data").symlink_to(work / "data.csv")
    return {
        "the ledger": (work / "L.jsonl", 2),
        "its head": (work / "L.jsonl.head", 2),
        "the release store": (work / "L.jsonl.releases", 2),
        "inside the release store": (work / "L.jsonl.releases" / "r.html", 2),
        "the input": (work / "data.csv", 2),
        "the spec": (work / "spec.yaml", 2),
        "a symlink to the ledger": (work / "to-ledger", 2),
        "a symlink to the input": (work / "to-data", 2),
        "a directory": (work / "adir", 2),
        "a FIFO without a reader": (work / "fifo", 2),
        "a missing directory": (work / "nowhere" / "r.html", 3),
    }


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() and not path.is_symlink() else None


def _release_args(work: Path, *extra: object) -> list[object]:
    return ["release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl", *extra]


def test_every_bad_report_summary_and_meta_target_is_refused_before_the_spend(work: Path) -> None:
    """--report, --summary-md and --meta go through the table's checks, and are neither the table nor its sidecar:
    before, each of these spent and then replaced (or appended to) the file, or exited 5, or hung (a FIFO)."""
    targets = _bad_targets(work)
    targets["the table of this release"] = (work / "out.csv", 2)
    targets["the sidecar of this release"] = (work / "out.csv.meta.json", 2)
    before = ledger_state(work)
    for option in ("--report", "--summary-md", "--meta"):
        for name, (target, code) in targets.items():
            if option == "--meta" and name == "the sidecar of this release":
                continue  # --meta names the sidecar: writing it is the point
            kept = _bytes(target)
            r = run_in_process(*_release_args(work, "-o", work / "out.csv", option, target))
            assert r.returncode == code, (option, name, r.stderr)
            assert r.stderr.startswith(b"dpcli: error: "), (option, name, r.stderr)
            assert r.stderr.count(b"\n") == 1, (option, name, r.stderr)
            assert ledger_state(work) == before, (option, name)  # nothing spent
            assert _bytes(target) == kept, (option, name)  # not replaced, not appended to
    # the report and the summary are two files
    r = run_in_process(*_release_args(work, "-o", work / "o2.csv", "--report", work / "x", "--summary-md", work / "x"))
    assert r.returncode == 2
    assert b"summary" in r.stderr
    assert ledger_state(work) == before
    assert stat.S_ISFIFO(os.stat(work / "fifo").st_mode)
    assert (work / "to-ledger").is_symlink()


def test_a_read_only_place_for_the_report_or_summary_is_refused_before_the_spend(work: Path) -> None:
    """Before: `--report` in a read-only directory spent, then exited 5."""
    with mounted_tmpfs(work / "ro", "ro,size=64k") as ro:
        before = ledger_state(work)
        for option in ("--report", "--summary-md", "--meta"):
            r = run_in_process(*_release_args(work, "-o", work / "o.csv", option, ro / "x"))
            assert r.returncode == 3, (option, r.stderr)
            assert b"is not writable" in r.stderr, (option, r.stderr)
        assert ledger_state(work) == before
        assert not (work / "o.csv").exists()
        r = run_in_process("init", work / "data.csv", "-o", ro / "spec.yaml")
        assert r.returncode == 3, r.stderr
        assert b"is not writable" in r.stderr, r.stderr


def test_a_report_that_cannot_be_written_after_the_spend_is_exit_5_naming_the_record(work: Path) -> None:
    """The table is written and paid for; the report fails on a full disk: exit 5, the record named, the table kept."""
    with mounted_tmpfs(work / "small", "size=64k") as small:
        with contextlib.suppress(OSError), open(small / "filler", "wb") as filler:  # fill it up, to ENOSPC
            filler.write(b"x" * (128 << 10))
        (work / "step.md").write_text("earlier step\n")
        r = run_in_process(*_release_args(work, "-o", work / "o.csv", "--report", small / "r.html",
                                          "--summary-md", work / "step.md"))
        err = one_line_error(r, 5, "the report could not be written", "record 1", "dpcli report")
        assert "No space left on device" in err
        assert (work / "o.csv").read_text().startswith("statistic,")
        assert not (small / "r.html").exists()
    assert run_in_process("ledger", "verify", "--ledger", work / "L.jsonl").returncode == 0


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """A blocking call in this process (opening a FIFO nobody reads) ends with TimeoutError after ``seconds``: a
    guard that turns a hang into a failure, not a time limit on anything that works."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError("blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_summary_fifo_is_refused_before_the_spend_not_waited_on(work: Path) -> None:
    """A FIFO nobody reads, as --summary-md: before, the release spent and then hung opening it."""
    os.mkfifo(work / "fifo")
    before = ledger_state(work)
    with _deadline(30):
        r = run_in_process(*_release_args(work, "-o", work / "o.csv", "--summary-md", work / "fifo"))
    one_line_error(r, 2, "not a regular file")
    assert ledger_state(work) == before
    assert not (work / "o.csv").exists()


def test_a_good_summary_is_appended_and_a_refused_run_leaves_no_summary_file(work: Path) -> None:
    (work / "step.md").write_text("earlier step\n")
    r = run_in_process(*_release_args(work, "-o", work / "o.csv", "--summary-md", work / "step.md"))
    assert r.returncode == 0, r.stderr
    assert (work / "step.md").read_text().startswith("earlier step\n### dpcli release: toy")
    r = run_in_process("budget", "set", "toy", "--epsilon", "0.25", "--ledger", work / "L.jsonl")
    assert r.returncode == 0, r.stderr  # now the cap is spent: the next release is refused (exit 4)
    r = run_in_process(*_release_args(work, "-o", work / "o3.csv", "--summary-md", work / "new.md"))
    assert r.returncode == 4, r.stderr
    assert not (work / "new.md").exists(), r.stderr


def test_report_command_targets_are_never_its_inputs_or_the_ledger(work: Path) -> None:
    """`dpcli report -o/--summary-md` go through the same checks, and are never the table, its sidecar or the ledger
    (before: -o the ledger or the table replaced it; --summary-md the ledger appended to it)."""
    r = run_in_process(*_release_args(work, "-o", work / "t.csv"))
    assert r.returncode == 0, r.stderr
    targets = _bad_targets(work)
    for not_its_own in ("the input", "the spec", "a symlink to the input"):  # the release's files, unknown to report
        del targets[not_its_own]
    targets["the table it reads"] = (work / "t.csv", 2)
    targets["the sidecar it reads"] = (work / "t.csv.meta.json", 2)
    before = ledger_state(work)
    for option in ("-o", "--summary-md"):
        for name, (target, code) in targets.items():
            kept = _bytes(target)
            other = [] if option == "-o" else ["-o", work / "page.html"]
            if option == "-o":
                args = ["report", work / "t.csv", "-o", target, "--ledger", work / "L.jsonl"]
            else:
                args = ["report", work / "t.csv", *other, "--summary-md", target, "--ledger", work / "L.jsonl"]
            r = run_in_process(*args)
            assert r.returncode == code, (option, name, r.stderr)
            assert ledger_state(work) == before, (option, name)
            assert _bytes(target) == kept, (option, name)
            assert not (work / "page.html").exists(), (option, name)


def test_report_reads_no_fifo(work: Path) -> None:
    """`dpcli report --meta FIFO` (or a FIFO as the table): refused, not waited on (before: it hung)."""
    r = run_in_process(*_release_args(work, "-o", work / "t.csv"))
    assert r.returncode == 0, r.stderr
    os.mkfifo(work / "fifo")
    with _deadline(30):
        r = run_in_process("report", work / "t.csv", "--meta", work / "fifo", "-o", work / "page.html")
    one_line_error(r, 2, "not a regular file")
    assert not (work / "page.html").exists()


def test_init_never_writes_over_the_csv_it_reads_or_the_ledger(work: Path) -> None:
    """`dpcli init --force -o` goes through the same checks (before: -o its own CSV replaced the data)."""
    before, data = ledger_state(work), (work / "data.csv").read_bytes()
    env = {"DPCLI_LEDGER": str(work / "L.jsonl")}
    for target in (work / "data.csv", work / "L.jsonl", work / "L.jsonl.head", work / "to-data"):
        if target.name == "to-data":
            target.symlink_to(work / "data.csv")
        r = run_in_process("init", work / "data.csv", "--force", "-o", target, env=env)
        assert r.returncode == 2, (target, r.stderr)
        assert r.stderr.startswith(b"dpcli: error: "), (target, r.stderr)
    assert (work / "data.csv").read_bytes() == data
    assert ledger_state(work) == before
    r = run_in_process("init", work / "data.csv", "--force", "-o", work / "spec2.yaml", env=env)
    assert r.returncode == 0, r.stderr
    assert (work / "spec2.yaml").read_text().startswith("# A dpcli spec skeleton"), r.stderr


# -- one-line messages -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "needle"), [
    (["release"], "Missing argument"),
    (["release", "spec.yaml", "--bogus"], "No such option"),
    (["release", "spec.yaml", "--lock-timeout", "abc"], "--lock-timeout"),
    (["budget", "set", "toy"], "--epsilon"),
    (["nosuchcommand"], "No such command"),
])
def test_usage_errors_are_one_dpcli_error_line(work: Path, args: list[str], needle: str) -> None:
    r = run_dpcli(*args, cwd=work)
    err = one_line_error(r, 2, needle)
    assert "see 'dpcli" in err


def test_no_arguments_prints_the_help_and_exits_2(work: Path) -> None:
    r = run_dpcli()
    assert r.returncode == 2
    assert b"Usage: dpcli" in r.stderr
    assert b"Commands" in r.stderr


def test_out_of_file_descriptors_is_one_line_and_spends_nothing(work: Path) -> None:
    import resource

    before = ledger_state(work)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (5, 5))

    r = subprocess.run([sys.executable, "-m", "dpcli", "release", str(work / "spec.yaml"), "-i", str(work / "data.csv"),
                        "-o", str(work / "o.csv"), "--ledger", str(work / "L.jsonl")],
                       capture_output=True, env=clean_env({"RUST_BACKTRACE": "0"}), preexec_fn=limit, timeout=60)
    err = r.stderr.decode()
    assert r.returncode in (1, 3, 5), err
    assert "Traceback" not in err
    assert err.rstrip("\n").splitlines()[-1].startswith("dpcli: error: ")
    assert ledger_state(work) == before
    assert not (work / "o.csv").exists()
