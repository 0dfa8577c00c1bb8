"""A signal during a Spark job (the Spark engine's part of docs/spec.md, "Runs, paths and failures"): the real
`dpcli release --engine spark` in a child process, a fault in pyspark's reading of the job's result; nothing is
spent, and an ignored signal stays ignored.

Marked ``spark`` (make test-spark); without pyspark or Java they skip, except under CI, where they fail."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from tests.engine.test_spark_engine import HOSTILE_HEADER, HOSTILE_SPEC, hostile_lines

pytestmark = pytest.mark.spark


# Runs `dpcli release --engine spark` (argv[2:]) with a fault in pyspark's reading of the job's result: the process
# sends itself the signal argv[1] there; with "cleanup-fails" pyspark's clean-up then fails while the interruption
# unwinds (as closing the result socket or joining its server thread can: the TypeError of the issue).
SIGNAL_DURING_A_SPARK_JOB = """\
import contextlib, os, signal, sys
from pyspark.sql.pandas import conversion

signum, mode = int(sys.argv[1]), sys.argv[2]
load = conversion._load_from_socket

@contextlib.contextmanager
def signalled(*args, **kwargs):
    with load(*args, **kwargs) as stream:
        try:
            os.kill(os.getpid(), signum)
            yield stream
        finally:
            if mode == "cleanup-fails":
                raise TypeError("a clean-up that failed")

conversion._load_from_socket = signalled
sys.argv = ["dpcli", *sys.argv[3:]]
from dpcli.__main__ import main
main()
"""


def _spark_release(tmp_path, signum: int, mode: str, preexec=None):
    from tests.helpers import clean_env, run_in_process

    spec = tmp_path / "s.yaml"
    spec.write_text(HOSTILE_SPEC)
    data = tmp_path / "d.csv"
    data.write_bytes(HOSTILE_HEADER + b"\n" + b"\n".join(hostile_lines(random.Random(3), 300)) + b"\n")
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1000", "--ledger", ledger).returncode == 0
    r = subprocess.run([sys.executable, "-c", SIGNAL_DURING_A_SPARK_JOB, str(signum), mode, "release", str(spec),
                        "--engine", "spark", "--spark-master", "local[1]", "--input", str(data), "--ledger",
                        str(ledger), "-o", str(tmp_path / "o.csv"), "--quiet"],
                       capture_output=True, env=clean_env(), timeout=600, preexec_fn=preexec)
    return r, ledger


def test_a_sigterm_during_a_spark_job_is_exit_143_with_nothing_spent(spark, tmp_path):
    """A SIGTERM while the driver read the job's result, with pyspark's clean-up failing as it unwound, ended in an
    internal error (TypeError, exit 1); it is the signal's 143, nothing spent."""
    import signal

    from dpcli.ledger import JsonlLedger

    r, ledger = _spark_release(tmp_path, signal.SIGTERM, "cleanup-fails")
    assert r.returncode == 143, r.stderr.decode()
    assert r.stderr.decode() == "dpcli: error: interrupted by SIGTERM; nothing was spent\n"
    assert not [x for x in JsonlLedger(ledger).records() if x.type == "spend"]


def test_an_ignored_sigint_stays_ignored_with_the_spark_engine(spark, tmp_path):
    """pyspark's SparkContext sets a SIGINT handler of its own (it cancels the jobs and raises KeyboardInterrupt),
    over a SIGINT the parent set to be ignored: a script's `dpcli release --engine spark &` was interrupted by it.
    dpcli puts the disposition back: the release completes."""
    import signal

    r, _ledger = _spark_release(tmp_path, signal.SIGINT, "plain",
                                preexec=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b"", r.stderr.decode()
    assert (tmp_path / "o.csv").exists()
