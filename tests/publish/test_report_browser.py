"""The report in a real headless Chromium (Debian's package): the page renders with every statistic's plot, and a
screenshot of it is not blank. Skipped when no chromium is installed, except under CI=true, where that fails
(.ci/run installs it: `apt-get install -y chromium`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.publish.test_report import NAMES, _plots, released  # noqa: F401 - `released` is the module fixture used here

pytestmark = pytest.mark.browser


def _chromium() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no chromium under CI: .ci/run installs Debian's package (apt-get install -y chromium)")
        pytest.skip("no chromium installed (apt-get install -y chromium)")
    return found


def _headless(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    # a fresh profile per run, and nothing that would reach the network on its own
    argv = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={profile}", *args,
    ]
    return subprocess.run(argv, capture_output=True, timeout=120)


def test_report_renders_in_chromium(released: Path, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    chromium = _chromium()
    url = (released / "report.html").as_uri()
    dom = _headless(chromium, tmp_path / "profile-dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    plots = _plots(dom.stdout.decode("utf-8"))  # the DOM as the browser built it
    assert list(plots) == NAMES
    assert all(("ol" if name == "top_jobs" else "svg") in plots[name] for name in NAMES)

    shot = tmp_path / "shot.png"
    r = _headless(chromium, tmp_path / "profile-shot", "--window-size=1000,1600", f"--screenshot={shot}", url)
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.is_file(), r.stderr[-2000:]
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape == (1600, 1000)
    # a blank (or all-one-colour) page has variance 0; the report's text and plots give thousands
    assert pixels.var() > 100
    # dark ink (text, axes, points) covers a real share of the page, not a stray pixel
    assert (pixels < 128).mean() > 0.005
