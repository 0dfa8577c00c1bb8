"""dpcli: differentially private statistics from a CSV and a YAML spec.

The public API, re-exported from the sub-packages that define it (docs/architecture.md, "The packages"):

    import dpcli
    spec = dpcli.load_spec("release.yaml")
    print(dpcli.make_plan(spec).epsilon)
    result = dpcli.release(spec, input="data.csv", output="out.csv", ledger="ledger.jsonl")

The names are loaded on first use (PEP 562), so ``dpcli --version`` and ``import dpcli`` import no polars or numpy.
``dpcli.audit.audit`` is the empirical audit (the sub-package ``dpcli.audit`` holds it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dpcli.core.version import __version__

if TYPE_CHECKING:
    from dpcli.core.accounting import Budget, Cap
    from dpcli.errors import (
        AuditFailed,
        BudgetRefused,
        DpcliError,
        InputError,
        InternalError,
        Interrupted,
        LedgerError,
        OutputError,
        ReleaseIdPaid,
        ReleaseIdTaken,
        ResourceError,
        SpecError,
        SpentThenFailed,
        UsageError,
    )
    from dpcli.plan.model import Plan, make_plan
    from dpcli.run.check import CheckResult, check_spec
    from dpcli.run.prepare import CheckedSpec, prepare_spec
    from dpcli.run.randomize import randomize
    from dpcli.run.release import Release, release
    from dpcli.specs.load import load_spec, parse_spec
    from dpcli.specs.model import Spec

# name -> the module that defines it
_PUBLIC = {
    "Budget": "dpcli.core.accounting",
    "Cap": "dpcli.core.accounting",
    "AuditFailed": "dpcli.errors",
    "BudgetRefused": "dpcli.errors",
    "DpcliError": "dpcli.errors",
    "InputError": "dpcli.errors",
    "InternalError": "dpcli.errors",
    "Interrupted": "dpcli.errors",
    "LedgerError": "dpcli.errors",
    "OutputError": "dpcli.errors",
    "ReleaseIdPaid": "dpcli.errors",
    "ReleaseIdTaken": "dpcli.errors",
    "ResourceError": "dpcli.errors",
    "SpecError": "dpcli.errors",
    "SpentThenFailed": "dpcli.errors",
    "UsageError": "dpcli.errors",
    "Plan": "dpcli.plan.model",
    "make_plan": "dpcli.plan.model",
    "CheckResult": "dpcli.run.check",
    "check_spec": "dpcli.run.check",
    "CheckedSpec": "dpcli.run.prepare",
    "prepare_spec": "dpcli.run.prepare",
    "randomize": "dpcli.run.randomize",
    "Release": "dpcli.run.release",
    "release": "dpcli.run.release",
    "Spec": "dpcli.specs.model",
    "load_spec": "dpcli.specs.load",
    "parse_spec": "dpcli.specs.load",
}

__all__ = [
    "AuditFailed",
    "Budget",
    "BudgetRefused",
    "Cap",
    "CheckResult",
    "CheckedSpec",
    "DpcliError",
    "InputError",
    "InternalError",
    "Interrupted",
    "LedgerError",
    "OutputError",
    "Plan",
    "Release",
    "ReleaseIdPaid",
    "ReleaseIdTaken",
    "ResourceError",
    "Spec",
    "SpecError",
    "SpentThenFailed",
    "UsageError",
    "__version__",
    "check_spec",
    "load_spec",
    "make_plan",
    "parse_spec",
    "prepare_spec",
    "randomize",
    "release",
]

def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # once: later look-ups do not come here
        return value
    raise AttributeError(f"module 'dpcli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
