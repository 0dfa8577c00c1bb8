"""dpcli: differentially private statistics from a CSV and a YAML spec.

Library entry points: :func:`dpcli.release.release` and :func:`dpcli.plan.make_plan`.
"""

__version__ = "0.3.0"  # the one version source: pyproject.toml reads it (dynamic)
