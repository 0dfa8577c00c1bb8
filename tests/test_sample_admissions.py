"""sample_data/admissions.csv (the series example's event file) is what its committed script makes, byte for byte,
and stays small: synthetic, made-up ids, a fixed seed (scripts/generate_admissions.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data" / "admissions.csv"


def test_the_event_file_is_its_script_output_and_small(tmp_path: Path) -> None:
    out = tmp_path / "admissions.csv"
    done = subprocess.run([sys.executable, ROOT / "scripts" / "generate_admissions.py", "--output", out],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == SAMPLE.read_bytes()
    assert SAMPLE.stat().st_size < 300_000
    assert SAMPLE.read_text(encoding="utf-8").splitlines()[0] == "admitted,patient,ward,stay_days"
