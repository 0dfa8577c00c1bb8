"""Run the real `dpcli` command with one fault injected at one step of a paid run (dpcli.run.paid).

    python tests/fault_driver.py STEP ACTION -- DPCLI-ARGS...

DPCLI-ARGS are `release ...` (a table, or frequency estimates from a randomized file) or `randomize ...`: the steps
are the protocol's, and where a command draws its own noise ("spent", "noise") the wrapped function is its own.

A child process of tests/run/test_faults.py. The step's real function is wrapped so that the fault happens right before
or right after it runs (the function itself still runs); nothing of dpcli is replaced. ACTION is ``kill`` (SIGKILL,
nothing can clean up), ``oserror`` (ENOSPC), ``memory`` (MemoryError), or ``sigint``/``sigterm``/``sighup`` (the
signal is sent to this process: where dpcli holds signals off it waits, elsewhere it is raised at once).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

STEPS = (
    "lock",  # under the ledger's lock, as the spend's append begins (its next head is staged first)
    "spent",  # right after the spend is durable, before any noise
    "noise",  # while the noise is drawn
    "store",  # before the table is written to the release store
    "stored",  # after the store, before the `released` record
    "released",  # after the `released` record
    "rename-before",  # before the output's temporary file is renamed into place
    "rename-after",  # right after that rename (before the sidecar)
    "sidecar",  # before the sidecar is renamed into place
)
# A person-level release with open keys has two steps more (tests/run/test_faults.py runs them on a file with a person
# of many rows and a person who brings many keys):
PERSON_STEPS = (
    "persons",  # as the engine finishes choosing each person's rows (before the spend)
    "select",  # while the open keys' noisy counts are compared with the threshold (after the spend)
)
# `dpcli randomize` writes no sidecar; a frequency release spends nothing, so only its writing steps apply
RANDOMIZE_STEPS = tuple(s for s in STEPS if s != "sidecar")
FREQUENCY_STEPS = ("rename-before", "rename-after", "sidecar")
ACTIONS = ("kill", "oserror", "memory", "sigint", "sigterm", "sighup")
# After the release is written (issue 23): as the command prints its summary, and as the interpreter tears down
# (an atexit callback, which runs after main() has decided the exit code). Only signals are sent there; ``warn``
# raises a Python warning at any step (its text names a path: it must never reach stderr).
LATE_STEPS = ("summary", "teardown")


def act(action: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "oserror":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    elif action == "memory":
        raise MemoryError()
    elif action == "warn":
        import warnings

        warnings.warn("a warning that names /a/source/path.py", RuntimeWarning, stacklevel=1)
    else:
        os.kill(os.getpid(), getattr(signal, action.upper()))


def wrap(owner: Any, name: str, action: str, after: bool, when: Callable[..., bool] = lambda *a, **k: True) -> None:
    original = getattr(owner, name)

    def faulty(*args: Any, **kwargs: Any) -> Any:
        hit = when(*args, **kwargs)
        if hit and not after:
            act(action)
        result = original(*args, **kwargs)
        if hit and after:
            act(action)
        return result

    setattr(owner, name, faulty)


def inject(step: str, action: str, output: str, command: str = "release") -> None:
    import dpcli.mechanisms.noise
    import dpcli.run.randomize
    import dpcli.run.release
    from dpcli.ledger.jsonl import JsonlLedger

    def renames(suffix: str) -> Callable[..., bool]:
        return lambda _src, dst, *a, **k: os.fspath(dst).endswith(suffix)

    if step == "lock":
        wrap(JsonlLedger, "_stage_head", action, after=False)
    elif step == "spent" and command == "randomize":
        wrap(dpcli.run.randomize, "_randomized_csv", action, after=False)
    elif step == "spent":
        wrap(dpcli.run.release, "draw_noise", action, after=False)
    elif step == "noise" and command == "randomize":
        wrap(dpcli.run.randomize, "randomize_keys", action, after=False)  # the first column's draw
    elif step == "noise":
        wrap(dpcli.mechanisms.noise, "add_discrete_laplace", action, after=False)
    elif step in ("store", "stored"):
        wrap(JsonlLedger, "store_table", action, after=step == "stored")
    elif step == "released":
        wrap(JsonlLedger, "mark_released", action, after=True)
    elif step in ("rename-before", "rename-after"):
        wrap(os, "replace", action, after=step == "rename-after", when=renames(os.path.basename(output)))
    elif step == "sidecar":
        wrap(os, "replace", action, after=False, when=renames(".meta.json"))
    elif step == "persons":
        from dpcli.engine.persons import PersonRows

        wrap(PersonRows, "finish", action, after=False)
    elif step == "select":
        # draw_noise calls it by its module's name
        wrap(dpcli.mechanisms.noise, "select_entries", action, after=False)
    elif step == "summary":
        import dpcli.cli.messages

        wrap(dpcli.cli.messages, "info", action, after=False)
    elif step == "teardown":
        import atexit

        atexit.register(act, action)
    else:
        raise SystemExit(f"unknown step {step}")


if __name__ == "__main__":
    step, action, sep, *argv = sys.argv[1:]
    assert sep == "--"
    assert step in STEPS + PERSON_STEPS + LATE_STEPS
    assert action in (*ACTIONS, "warn")
    output = argv[argv.index("-o") + 1]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    inject(step, action, output, argv[0])
    from dpcli.cli.app import main

    main(argv)
