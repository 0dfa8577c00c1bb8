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
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dpcli.errors import InputError, UsageError
from dpcli.run.release import release
from tests.helpers import TOY_SPEC, clean_env, mounted_tmpfs, run_dpcli, run_in_process

SPEC = TOY_SPEC
DATA = b"age\n34\n71\n15\n52\n"


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(SPEC, DATA, cap="10")


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


# -- the stdin spool -------------------------------------------------------------------------------------------------


def spool_env(work: Path) -> dict:
    (work / "tmp").mkdir(exist_ok=True)
    return {"TMPDIR": str(work / "tmp")}


def release_stdin(work: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dpcli", "release", str(work / "spec.yaml"), "-i", "-", "-o",
            str(work / "o.csv"), "--ledger", str(work / "L.jsonl"), *extra]


def test_empty_stdin_names_standard_input_not_the_spool(work: Path) -> None:
    r = subprocess.run(release_stdin(work), input=b"", capture_output=True, env=clean_env(spool_env(work)))
    err = one_line_error(r, 3, "standard input")
    assert str(work / "tmp") not in err
    assert "dpcli-" not in err
    assert list((work / "tmp").iterdir()) == []


def test_the_spool_cap_ends_the_run_with_exit_3_before_the_spend(work: Path) -> None:
    before = ledger_state(work)
    big = DATA + b"50\n" * 1000
    r = subprocess.run(release_stdin(work, "--max-input-bytes", "1k"), input=big, capture_output=True,
                       env=clean_env(spool_env(work)))
    one_line_error(r, 3, "--max-input-bytes", "nothing was spent")
    assert ledger_state(work) == before
    assert list((work / "tmp").iterdir()) == []
    r = subprocess.run(release_stdin(work, "--max-input-bytes", "1M"), input=big, capture_output=True,
                       env=clean_env(spool_env(work)))
    assert r.returncode == 0, r.stderr.decode()
    assert list((work / "tmp").iterdir()) == []


@pytest.mark.parametrize("value", ["2x", "0", "-5", "1e9"])
def test_a_bad_spool_cap_is_a_usage_error(work: Path, value: str) -> None:
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", "--ledger", work / "L.jsonl", "--max-input-bytes", value,
                  stdin=DATA)
    one_line_error(r, 2, "--max-input-bytes")


@pytest.mark.parametrize("value", ["inf", "1e12", "nan", "-1"])
def test_an_input_timeout_beyond_its_range_is_a_usage_error(work: Path, value: str) -> None:
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", "--ledger", work / "L.jsonl",
                  f"--input-timeout={value}", stdin=DATA)
    one_line_error(r, 2, "--input-timeout")


def test_library_errors_name_no_flag_and_the_cli_adds_it(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library caller reads the fact in the library's words (its keyword arguments); the CLI's one line names the
    flag in their place and appends the hint (dpcli/errors.py, dpcli/cli/app.py main)."""
    from dpcli.engine.inputs import check_input_timeout, parse_size
    from dpcli.ledger import resolve_ledger

    monkeypatch.delenv("DPCLI_LEDGER", raising=False)
    for call in (lambda: check_input_timeout(-1.0), lambda: parse_size("2x"), lambda: resolve_ledger(None, None)):
        with pytest.raises(UsageError) as caught:
            call()
        assert "--" not in str(caught.value), str(caught.value)
        assert caught.value.option or caught.value.hint
    with pytest.raises(UsageError, match=r"^input_timeout: must be between 0 and 1000000 seconds") as caught:
        check_input_timeout(float("nan"))
    assert caught.value.option == "--input-timeout"
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", "--ledger", work / "L.jsonl", "--input-timeout=nan",
                  stdin=DATA)
    assert r.stderr.decode() == (
        "dpcli: error: --input-timeout: must be between 0 and 1000000 seconds (0 waits forever)\n"
    )
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", stdin=DATA)
    one_line_error(r, 2, "no ledger", "; pass --ledger PATH or URL")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_spooling_removes_the_private_spool_and_spends_nothing(work: Path, signum: int) -> None:
    before = ledger_state(work)
    proc = subprocess.Popen(release_stdin(work), stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=clean_env(spool_env(work)))
    assert proc.stdin is not None
    proc.stdin.write(DATA)  # a header and some rows, then the writer stalls
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    spool: list[Path] = []
    while time.monotonic() < deadline and not any(d.glob("input.csv") for d in spool):
        spool = list((work / "tmp").glob("dpcli-*"))
        time.sleep(0.05)
    assert len(spool) == 1
    assert stat.S_IMODE(spool[0].stat().st_mode) == 0o700  # a private directory
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, err
    assert err.decode() == f"dpcli: error: interrupted by {signal.Signals(signum).name}; nothing was spent\n"
    assert list((work / "tmp").iterdir()) == []
    assert ledger_state(work) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_lock_wait_ends_the_run_while_the_lock_is_held_with_nothing_spent(
    work: Path, signum: int
) -> None:
    """Signals are held from the spend's write until the table is stored, but not during the wait for the ledger's
    lock: a Ctrl-C there used to be held too, so the run waited, spent and then exited 5."""
    import fcntl
    import queue
    import threading

    before = ledger_state(work)
    proc = subprocess.Popen(release_stdin(work, "--verbose", "--lock-timeout", "60"), stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=clean_env(spool_env(work)))
    assert proc.stdin is not None
    assert proc.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in iter(proc.stderr.readline, b"")], daemon=True)
    reader.start()

    def wait_for(phase: bytes) -> None:
        while phase not in lines.get(timeout=30):
            pass

    proc.stdin.write(DATA)
    proc.stdin.flush()
    wait_for(b"budget available")  # the ledger was read; now it spools standard input, holding no lock
    with open(work / "L.jsonl", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another writer holds the ledger
        proc.stdin.close()
        wait_for(b"exact aggregates computed")  # next: the spend, which waits for the lock
        time.sleep(0.5)
        proc.send_signal(signum)
        # a guard, not a time limit: a run that waited for the lock could not end while this test holds it, so
        # ending with 128 + signum and nothing spent before the lock is released is the evidence
        proc.wait(timeout=120)
        assert ledger_state(work) == before
    reader.join(timeout=10)
    proc.stderr.close()  # read to its end by the reader thread
    last = list(lines.queue)[-1].decode()
    assert proc.returncode == 128 + signum, last
    assert last == f"dpcli: error: interrupted by {signal.Signals(signum).name}; nothing was spent\n"
    assert not (work / "o.csv").exists()
    assert list((work / "tmp").iterdir()) == []


def test_an_idle_timeout_removes_the_spool(work: Path) -> None:
    with subprocess.Popen(release_stdin(work, "--input-timeout", "0.5"), stdin=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=clean_env(spool_env(work))) as proc:  # closes its pipes
        assert proc.stdin is not None
        proc.stdin.write(DATA)
        proc.stdin.flush()  # and the writer stalls, its end kept open
        proc.wait(timeout=30)
        assert proc.stderr is not None
        err = proc.stderr.read()
    assert proc.returncode == 3
    assert b"--input-timeout" in err
    assert list((work / "tmp").iterdir()) == []


def test_input_file_spools_nothing_for_a_regular_file(work: Path) -> None:
    from dpcli.engine.inputs import InputFile

    with InputFile(work / "data.csv") as src:
        assert src.path == work / "data.csv"
        assert not src.spooled


def test_the_spool_error_names_standard_input_in_library_use(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    read, write = os.pipe()
    os.close(write)  # an empty standard input
    with io.TextIOWrapper(io.FileIO(read, "r")) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        with pytest.raises(InputError) as caught:
            release(work / "spec.yaml", input="-", output=work / "o.csv", ledger=work / "L.jsonl")
    assert "standard input" in str(caught.value)
    assert "dpcli-" not in str(caught.value)


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


# -- issue 23: process limits and signals from the first instant --------------------------------------------------


def test_an_open_file_limit_is_said_as_one_and_spends_nothing(work: Path) -> None:
    """`ulimit -n 5` ended this release with exit 3 "cannot read input" (an input error, for a limit of the process;
    `ulimit -n 8` did on a 200k-row file), 6 or 7 that file's with exit 5 "cannot read ledger". Now: exit 1 naming
    the limit, before anything is read."""
    import resource

    before = ledger_state(work)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (5, 5))

    r = subprocess.run([sys.executable, "-m", "dpcli", "release", str(work / "spec.yaml"), "-i", str(work / "data.csv"),
                        "-o", str(work / "o.csv"), "--ledger", str(work / "L.jsonl")],
                       capture_output=True, env=clean_env({"RUST_BACKTRACE": "0"}), preexec_fn=limit, timeout=60)
    one_line_error(r, 1, "too many open files", "ulimit -n", "nothing was read or spent")
    assert ledger_state(work) == before
    assert not (work / "o.csv").exists()


# Runs the real entry point (python -m dpcli) and sends itself a signal (argv[1]) as typer is imported: while the
# command line is still loading, before cli.main runs.
SIGNAL_WHILE_LOADING = """\
import os, runpy, sys

signum = int(sys.argv[1])

class SignalOnImport:
    def find_spec(self, name, path, target=None):
        if name == "typer":
            os.kill(os.getpid(), signum)
        return None

sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["dpcli", *sys.argv[2:]]
runpy.run_module("dpcli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_dpcli_loads_is_one_line_saying_nothing_was_spent(work: Path, signum: int) -> None:
    """The handlers were installed by cli.main, after typer (and for a release, polars and numpy) were imported: a
    SIGTERM in that first second killed the run without a word, and a SIGINT printed a traceback."""
    before = ledger_state(work)
    r = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_LOADING, str(int(signum)), "release",
                        str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"),
                        "--ledger", str(work / "L.jsonl")], capture_output=True, env=clean_env(), timeout=60)
    assert r.stderr.decode() == f"dpcli: error: interrupted by {signal.Signals(signum).name}; nothing was spent\n"
    assert r.returncode == 128 + signum
    assert ledger_state(work) == before
    assert not (work / "o.csv").exists()


# A polars query whose own function sends SIGINT to the process while the query runs, under dpcli's handlers;
# argv[1] == "ignored": SIGINT was ignored by the parent (a script's `cmd &`), as dpcli finds it at start.
SIGINT_DURING_A_POLARS_QUERY = """\
import os, signal, sys
from dpcli.core import signals
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
signals.install()
import polars as pl

def interrupt(column):
    os.kill(os.getpid(), signal.SIGINT)
    return column

query = pl.LazyFrame({"a": list(range(1000))}).select(pl.col("a").map_batches(interrupt, return_dtype=pl.Int64).sum())
with signals.Held() as hold:
    hold.hold_from_here()
    print("query", query.collect().item(), flush=True)
    try:
        hold.release()
        print("released: nothing raised", flush=True)
    except BaseException as exc:
        print("released:", type(exc).__name__, flush=True)
"""


@pytest.mark.parametrize("inherited", ["ignored", "handled"])
def test_polars_native_sigint_handler_never_overrides_dpcli(inherited: str) -> None:
    """polars installs a native SIGINT handler as it loads (it stops a running query with KeyboardInterrupt): with
    SIGINT inherited ignored, a query was interrupted anyway (issue 25). dpcli sets each disposition again once
    polars is loaded: an ignored SIGINT stays ignored, and a held one waits for the end of the held stretch."""
    r = subprocess.run([sys.executable, "-c", SIGINT_DURING_A_POLARS_QUERY, inherited],
                       capture_output=True, env=clean_env(), timeout=60)
    expected = "nothing raised" if inherited == "ignored" else "Interrupted"
    assert r.stdout.decode() == f"query 499500\nreleased: {expected}\n", (r.stdout, r.stderr.decode()[-500:])


ROWS_SPEC = """\
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  age: {type: int, bounds: [0, 100]}
  sex: {type: category, categories: [F, M]}
  income: {type: float, bounds: [0, 5000000], precision: 1}
statistics:
"""
LIMIT_RELEASES = {
    # the 200k-row release
    "200k rows": ROWS_SPEC + "  - {name: n, kind: count, by: [sex]}\n  - {name: m, kind: mean, column: age}\n",
    # a 5M-cell histogram, ~429 MB by the documented estimate
    "5M cells": ROWS_SPEC
    + "  - {name: h, kind: histogram, column: income, bins: {start: 0, stop: 5000000, step: 1}}\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("release", sorted(LIMIT_RELEASES))
def test_under_an_address_space_limit_a_release_runs_or_ends_in_one_line(tmp_path: Path, release: str) -> None:
    """Under `prlimit --as` between 600 and 1000 MB a 200k-row release aborted in the allocator (SIGABRT, no message)
    and a 5M-cell histogram too, though under the documented estimate: glibc gave each of polars' threads a 64 MB
    arena, and Rust aborts on a failed allocation. Now each run either releases (one spend, its output) or ends
    before anything is read: exit 1, one line naming the limit, the ledger unchanged. Never a signal."""
    import resource

    from dpcli.ledger import JsonlLedger
    from tests.helpers import run_in_process

    (tmp_path / "spec.yaml").write_text(LIMIT_RELEASES[release])
    rows = 200_000 if release == "200k rows" else 1_000
    (tmp_path / "data.csv").write_text(
        "age,sex,income\n" + "".join(f"{i % 101},{'FM'[i % 2]},{i * 7919 % 5_000_000}.5\n" for i in range(rows)))
    r = run_in_process("budget", "set", "toy", "--epsilon", "100", "--ledger", tmp_path / "L.jsonl")
    assert r.returncode == 0, r.stderr
    for limit_mb in (600, 700, 800, 900, 1000):
        spent_before = len([x for x in JsonlLedger(tmp_path / "L.jsonl").records() if x.type == "spend"])
        (tmp_path / "o.csv").unlink(missing_ok=True)

        def limit(limit_mb: int = limit_mb) -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_mb * 2**20, limit_mb * 2**20))

        # the timeout is a safety net against a hang, not a claim about speed
        r = subprocess.run([sys.executable, "-m", "dpcli", "release", str(tmp_path / "spec.yaml"), "-i",
                            str(tmp_path / "data.csv"), "-o", str(tmp_path / "o.csv"), "--ledger",
                            str(tmp_path / "L.jsonl"), "--quiet"],
                           capture_output=True, env=clean_env(), preexec_fn=limit, timeout=600)
        spends = [x for x in JsonlLedger(tmp_path / "L.jsonl").records() if x.type == "spend"]
        if r.returncode == 0:
            assert len(spends) == spent_before + 1
            assert (tmp_path / "o.csv").exists()
            assert r.stderr == b""
        else:
            one_line_error(r, 1, "ulimit -v", "nothing was read or spent")
            assert len(spends) == spent_before, limit_mb
            assert not (tmp_path / "o.csv").exists(), limit_mb
