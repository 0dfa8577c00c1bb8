"""The input progress bar, on a real pseudo-terminal: shown only to a person at a terminal, never with a data value,
and always off the terminal before the one `dpcli: error:` line or the summary.

Each test runs `python -m dpcli release` with its stderr on a pty (stdlib `pty`) and reads every byte the child
writes there, frames of the bar included (rich erases them at the end). What a person finally sees is that byte
stream fed to pyte, a terminal emulator; the tests that look at the final screen skip where pyte is missing (the
raw checks before it still run). No timing is asserted: a run that never ends fails at the deadline below.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_dpcli, run_in_process
from tests.spec_builder import spec_text

COLUMNS, LINES = 250, 40  # wide enough that no message line wraps
DEADLINE = 300  # seconds: a run still going then is a hang, reported as a failure, never a timing assertion
BAR = b"reading input"
CSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
ROWS = 20_000

SPEC = spec_text(
    {"city": "{type: category, categories: [north, south]}", "income": "{type: int, bounds: [0, 100]}"},
    ["{name: by_city, kind: count, by: [city]}", "{name: income_sum, kind: sum, column: income}"],
    privacy="unit: row, neighbours: add_remove, epsilon: 1.0",
)


def markers() -> tuple[list[str], list[int]]:
    """Cells no output may show: a unique undeclared category per row, and a unique 12-digit out-of-bounds number.
    Twelve digits, because the terminal also shows the ledger's head, 16 hex digits that change every run (the chain
    covers the record's time): a 9-digit marker sits in one of its 8 windows with probability 8 * 20000 / 16^9 =
    2.3e-6 (a false leak); a 12-digit one in one of its 5 windows with 5 * 20000 / 16^12 = 3.6e-10."""
    return [f"Qzx{i:05d}Marker" for i in range(ROWS)], [734_000_000_000 + 7919 * i for i in range(ROWS)]


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    cities, incomes = markers()
    lines = "".join(f"{c},{n}\n" for c, n in zip(cities, incomes, strict=True))
    return make_work(SPEC, "city,income\n" + lines, cap="1000")


def tty_env(**extra: str) -> dict:
    """The environment of a person at a terminal: no $CI (CI itself sets it), no NO_COLOR, a real TERM."""
    env = clean_env({"TERM": "xterm-256color", "COLUMNS": str(COLUMNS), "LINES": str(LINES)})
    for name in ("CI", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)
    env.update(extra)
    return env


def run_on_tty(
    args: list[object], env: dict, cwd: Path, *, stdin: bytes | None = None, keep_stdin_open: bool = False,
    on_bar: Callable[[subprocess.Popen], None] | None = None, stdout_too: bool = False,
) -> tuple[int, bytes]:
    """Run dpcli with stderr (and with ``stdout_too`` stdout) on a pseudo-terminal; (exit code, every byte written
    to that terminal).

    ``stdin``: bytes written to its standard input (then closed, unless ``keep_stdin_open``); None: no input.
    ``on_bar(proc)`` is called once, as soon as the bar has been drawn."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", LINES, COLUMNS, 0, 0))
    piped = stdin is not None or keep_stdin_open
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpcli", *map(str, args)], cwd=cwd, env=env, stderr=slave,
        stdout=slave if stdout_too else subprocess.DEVNULL, stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
    )
    os.close(slave)
    feeder = None
    if stdin is not None:
        def feed() -> None:
            with contextlib.suppress(BrokenPipeError, OSError):  # dpcli may stop reading (a size cap) and exit
                proc.stdin.write(stdin)  # type: ignore[union-attr]
                if not keep_stdin_open:
                    proc.stdin.close()  # type: ignore[union-attr]

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
    raw = b""
    deadline = time.monotonic() + DEADLINE
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has gone
                break
            if not chunk:
                break
            raw += chunk
            if on_bar is not None and BAR in raw:
                on_bar(proc)
                on_bar = None
        else:
            proc.kill()
            pytest.fail(f"dpcli did not finish within {DEADLINE} s; its terminal so far: {raw[-2000:]!r}")
        code = proc.wait(timeout=DEADLINE)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        if piped:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
    if feeder is not None:
        feeder.join(timeout=DEADLINE)
    return code, raw


def screen(raw: bytes) -> list[str]:
    """The terminal's final lines as a person sees them (pyte emulates it), trailing blanks dropped."""
    import pyte
    terminal = pyte.Screen(COLUMNS, LINES)
    pyte.ByteStream(terminal).feed(raw)
    lines = [line.rstrip() for line in terminal.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def release_args(work: Path, *extra: object) -> list[object]:
    return ["release", work / "spec.yaml", "--ledger", work / "L.jsonl", "-o", work / "out.csv", *extra]


def test_the_bar_shows_bytes_of_the_size_on_a_terminal_and_is_gone_before_the_summary(work: Path) -> None:
    size = (work / "data.csv").stat().st_size
    code, raw = run_on_tty(release_args(work, "-i", work / "data.csv"), tty_env(), work)
    assert code == 0, raw
    assert BAR in raw
    assert f"/{size / 1000:,.1f} kB".encode() in raw  # the input's size, the one figure the threat model grants
    # bytes and a ratio only: no rate, no ETA, no elapsed time (rich writes those as "/s" and "0:00:01")
    shown = CSI.sub(b"", raw)
    assert b"/s" not in shown
    assert not re.search(rb"\d:\d\d", shown)
    final = screen(raw)
    assert not any("reading input" in line for line in final)
    assert final[0].startswith("dpcli: released 2 statistic(s)")


def test_a_table_written_to_the_same_terminal_starts_on_a_clean_line(work: Path) -> None:
    """`-o -` with stdout and stderr on one terminal: the bar is gone before the table is written."""
    args = ["release", work / "spec.yaml", "--ledger", work / "L.jsonl", "-i", work / "data.csv", "-o", "-"]
    code, raw = run_on_tty(args, tty_env(), work, stdout_too=True)
    assert code == 0, raw
    assert BAR in raw
    assert raw.rindex(BAR) < raw.index(b"statistic,")
    final = screen(raw)
    assert final[0] == "statistic,kind,column,city,value,ci_low,ci_high,epsilon"
    cells = [line.split(",")[:1] + line.split(",")[3:4] for line in final[1:4]]
    assert cells == [["by_city", "north"], ["by_city", "south"], ["income_sum", ""]]
    assert final[4].startswith("dpcli: released 2 statistic(s)")
    assert not any("reading input" in line for line in final)


def test_no_cell_of_the_input_reaches_the_terminal(work: Path) -> None:
    code, raw = run_on_tty(release_args(work, "-i", work / "data.csv", "--verbose"), tty_env(), work)
    assert code == 0, raw
    assert BAR in raw
    cities, incomes = markers()
    assert b"Marker" not in raw
    leaked = [n for n in incomes if str(n).encode() in raw or f"{n:,}".encode() in raw]
    assert not leaked
    assert not [c for c in cities if c.encode() in raw]


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        (["--quiet"], {}),
        (["--json"], {}),
        ([], {"CI": "1"}),
        ([], {"CI": "true"}),
        ([], {"NO_COLOR": "1"}),
        ([], {"TERM": "dumb"}),
    ],
    ids=["quiet", "json", "CI=1", "CI=true", "NO_COLOR", "TERM=dumb"],
)
def test_no_bar_with_quiet_json_ci_no_color_or_a_dumb_terminal(work: Path, flags: list[str], env: dict) -> None:
    code, raw = run_on_tty(release_args(work, "-i", work / "data.csv", *flags), tty_env(**env), work)
    assert code == 0, raw
    assert BAR not in raw
    assert b"\x1b[?25l" not in raw  # rich hides the cursor while a bar is live
    if "--quiet" in flags:
        assert raw == b""
    if "--json" in flags:
        assert raw.startswith(b"{")
        assert raw.count(b"\n") == 1


def test_no_bar_when_stderr_is_a_pipe(work: Path) -> None:
    env = tty_env()
    r = run_dpcli(*release_args(work, "-i", work / "data.csv"), env=env, cwd=work)
    assert r.returncode == 0, r.stderr
    assert b"reading input" not in r.stderr
    assert b"\x1b" not in r.stderr
    assert r.stderr.startswith(b"dpcli: released 2 statistic(s)")


def _assert_one_clean_error_line(raw: bytes, expected: str) -> None:
    """The bar was drawn, then taken off; the error line comes after its last frame, starts a line, and nothing
    of the bar is written after it."""
    assert BAR in raw
    at = raw.rindex(b"dpcli: error:")
    assert raw.rindex(BAR) < at
    assert CSI.sub(b"", raw[:at]).endswith((b"\r", b"\n"))  # column 0
    assert raw[at:] == expected.encode() + b"\r\n"  # the pty turns "\n" into "\r\n"
    final = screen(raw)
    assert final[-1] == expected
    assert not any("reading input" in line for line in final)


def test_an_error_while_reading_leaves_one_clean_error_line(work: Path) -> None:
    """A stream over --max-input-bytes ends the run (exit 3) while the bar is up: the same one line as on a pipe."""
    data = (work / "data.csv").read_bytes()
    args = release_args(work, "--max-input-bytes", "64k")
    piped = run_dpcli(*args, stdin=data, env=tty_env(), cwd=work)
    assert piped.returncode == 3
    expected = piped.stderr.decode().rstrip("\n")
    assert expected.startswith("dpcli: error: ")
    assert "\n" not in expected
    code, raw = run_on_tty(args, tty_env(), work, stdin=data)
    assert code == 3
    _assert_one_clean_error_line(raw, expected)


def test_ctrl_c_while_reading_takes_the_bar_off_and_says_one_line(work: Path) -> None:
    """SIGINT while dpcli waits for standard input, the bar up: exit 130, nothing spent, one clean line."""
    code, raw = run_on_tty(
        release_args(work), tty_env(), work, keep_stdin_open=True,
        on_bar=lambda proc: proc.send_signal(signal.SIGINT),
    )
    assert code == 130
    _assert_one_clean_error_line(raw, "dpcli: error: interrupted by SIGINT; nothing was spent")
    shown = run_in_process("budget", "show", "--json", "--ledger", work / "L.jsonl")
    assert b'"releases": 0' in shown.stdout


class _Terminal:
    """A text stream that says it is a terminal, keeping what is written to it."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("not a real descriptor")


def test_the_bar_renders_bytes_and_ratio_only_however_often_it_is_told() -> None:
    """Many reports over time (as a chunked engine sends them) give rich what a rate or an ETA would need: the bar
    must still show neither. The pauses only let rich see time pass; nothing here depends on how long they take."""
    from dpcli.cli.progress import InputBar

    terminal = _Terminal()
    bar = InputBar(terminal)  # type: ignore[arg-type]
    total = 3_000_000_000
    for read in range(0, total, total // 20):
        bar.on_bytes(read, total)
        bar._progress.refresh()  # every report drawn, not only those a refresh tick happens to see
        time.sleep(0.01)
    bar.on_bytes(total, total)
    shown = CSI.sub(b"", terminal.text.encode())
    assert b"reading input" in shown
    assert b"2.9/3.0 GB" in shown
    assert b"95%" in shown
    assert b"/s" not in shown
    assert not re.search(rb"\d:\d\d", shown)
    assert b"?" not in shown  # rich's placeholder for a rate or time it cannot compute yet


def test_a_stream_of_unknown_size_shows_bytes_read_without_a_total_and_its_end_erases_the_bar() -> None:
    from dpcli.cli.progress import InputBar

    terminal = _Terminal()
    bar = InputBar(terminal)  # type: ignore[arg-type]
    bar.on_bytes(0, None)
    bar.on_bytes(5_000_000, None)
    bar._progress.refresh()
    bar.on_bytes(5_000_001, 5_000_001)  # the last report: the stream's size, known at its end
    assert bar._progress is None  # erased: reading is over
    bar.on_bytes(7, 9)  # a late report draws nothing again
    assert bar._progress is None
    shown = CSI.sub(b"", terminal.text.encode())
    assert b"5.0/? MB" in shown


def test_release_reports_bytes_of_the_file_only_ending_with_its_size(work: Path) -> None:
    """The library side: ``on_input_bytes`` hears the bytes read, never beyond the file's size (the public figure),
    in order, and a last report with read == total, which is what takes the bar off before the table is written."""
    from dpcli.run.release import release

    calls: list[tuple[int, int | None]] = []
    release(work / "spec.yaml", input=work / "data.csv", output=work / "out.csv", ledger=work / "L.jsonl",
            on_input_bytes=lambda read, total: calls.append((read, total)))
    size = (work / "data.csv").stat().st_size
    assert calls[-1] == (size, size)
    assert all(total == size and 0 <= read <= size for read, total in calls)
    reads = [read for read, _ in calls]
    assert reads == sorted(reads)
