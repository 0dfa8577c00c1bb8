"""A signal that lands while Python runs a finalizer or a weakref callback (seen in CI: an import lock's callback during
a release, 'Exception ignored in: <function _get_module_lock.<locals>.cb>', and the SIGTERM was lost): the handler's
Interrupted cannot leave such a function, so dpcli.core.signals sends it again, and the run ends by it."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import clean_env

SCRIPT = """
import signal, time
from dpcli.core import signals
from dpcli.errors import Interrupted
signals.install()
class Finalized:
    def __del__(self):
        signals._raise_interrupted(signal.SIGTERM, None)  # the handler, as if the signal landed in the finalizer
try:
    Finalized()
    time.sleep(5)
    print("signal lost")
except Interrupted as exc:
    print("raised", exc.signum)
"""


def test_a_signal_inside_a_finalizer_is_not_lost() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, env=clean_env(), timeout=60)
    assert done.stdout == b"raised 15\n", (done.stdout, done.stderr)
    assert b"Exception ignored" not in done.stderr
