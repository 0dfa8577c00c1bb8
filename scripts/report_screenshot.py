"""docs/report.png: the README's picture of `dpcli report`, made from a real release of configs/example.yaml over the
synthetic sample_data/people.csv (throwaway ledger, cap ε=10), rendered by headless Chromium (Debian's package).

    .venv/bin/python scripts/report_screenshot.py [--output docs/report.png] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "report.png")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--height", type=int, default=2900, help="pixels of the page shown (from the top)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dpcli = [sys.executable, "-m", "dpcli"]
        subprocess.run([*dpcli, "budget", "set", "people", "--epsilon", "10", "--ledger", work / "L.jsonl"],
                       check=True, capture_output=True)
        subprocess.run(
            [*dpcli, "release", ROOT / "configs" / "example.yaml", "-i", ROOT / "sample_data" / "people.csv",
             "--ledger", work / "L.jsonl", "--release-id", "2026-01-31", "-o", work / "out.csv",
             "--report", work / "report.html", "--quiet"],
            check=True,
        )
        subprocess.run(
            [args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={work / 'profile'}", f"--window-size=1000,{args.height}",
             f"--screenshot={args.output}", (work / "report.html").as_uri()],
            check=True, capture_output=True,
        )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
