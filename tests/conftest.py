"""Hypothesis profiles for the whole suite.

- dev (the default): Hypothesis' own defaults.
- ci (chosen when $CI is set): derandomized, so a CI run tests the same examples every time and a commit that
  passed cannot fail later by chance (no example database either).
- thorough: 20x the examples, for a deliberate long search: HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest ...
$HYPOTHESIS_PROFILE names a profile explicitly. Tests that set max_examples themselves keep it; tests/test_sensitivity_property.py
scales its counts with the loaded profile.
"""

import os

from hypothesis import settings

settings.register_profile("dev")
settings.register_profile("ci", derandomize=True)
settings.register_profile("thorough", max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
