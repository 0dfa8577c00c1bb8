"""dpcli/__init__.py: the library's names, re-exported from the modules that define them and loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dpcli


def test_every_public_name_is_the_object_its_module_defines() -> None:
    import importlib

    for name in dpcli.__all__:
        if name == "__version__":
            continue
        module = importlib.import_module(dpcli._PUBLIC[name])
        assert getattr(dpcli, name) is getattr(module, name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="not_a_name"):
        dpcli.not_a_name  # noqa: B018 - the look-up is the test


def test_importing_dpcli_imports_neither_polars_nor_numpy() -> None:
    # `dpcli --version` and `import dpcli` stay light: the names load their modules when first used
    code = "import sys, dpcli; print(sorted(m for m in ('polars', 'numpy', 'typer', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
