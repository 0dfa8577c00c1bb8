"""Imports run one way: a module of dpcli/ imports only modules of its own layer or of a lower one.

The layers are the table in docs/architecture.md (between its ``layers:begin`` and ``layers:end`` markers), so the
document and the code cannot drift apart: an upward import, a module in no layer, or a layer naming a file that
does not exist fails here. Every import is read with ``ast`` (also those inside functions and under
TYPE_CHECKING), nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dpcli"
DOC = ROOT / "docs" / "architecture.md"


def read_layers(text: str) -> dict[str, int]:
    """Layer of each entry of the table: a file (``dpcli/x.py``) or a package (``dpcli/ledger/``)."""
    table = text.split("<!-- layers:begin -->", 1)[1].split("<!-- layers:end -->", 1)[0]
    layers: dict[str, int] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        for entry in re.findall(r"`([^`]+)`", cells[2]):
            assert entry not in layers, f"{entry} is in two layers"
            layers[entry] = int(cells[0])
    return layers


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(path: Path, layers: dict[str, int]) -> int | None:
    rel = path.relative_to(ROOT).as_posix()
    if rel in layers:
        return layers[rel]
    for entry, layer in layers.items():
        if entry.endswith("/") and rel.startswith(entry):
            return layer
    return None


def module_paths() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(source: str, importer: str, modules: dict[str, Path]) -> set[str]:
    """The dpcli modules that ``source`` (the module ``importer``) imports, resolved to known module names."""
    package = importer if modules[importer].name == "__init__.py" else importer.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            # `from dpcli import render` imports the module dpcli.cli.render; `from dpcli import __version__` dpcli
            names = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # dpcli.ledger.base.X -> dpcli.ledger.base
                name = name.rpartition(".")[0]
            if name.startswith("dpcli"):
                found.add(name)
    return found


def upward_imports(layers: dict[str, int], sources: dict[str, str] | None = None) -> list[str]:
    """Every import of a module from a higher layer, as ``importer (layer) -> imported (layer)``."""
    modules = module_paths()
    bad = []
    for name, path in modules.items():
        source = sources.get(name) if sources and name in sources else path.read_text(encoding="utf-8")
        mine = layer_of(path, layers)
        assert mine is not None
        for target in sorted(imported_modules(source, name, modules)):
            theirs = layer_of(modules[target], layers)
            assert theirs is not None
            if theirs > mine:
                bad.append(f"{name} ({mine}) -> {target} ({theirs})")
    return bad


@pytest.fixture(scope="module")
def layers() -> dict[str, int]:
    return read_layers(DOC.read_text(encoding="utf-8"))


def test_every_module_is_in_one_layer(layers: dict[str, int]) -> None:
    missing = [str(p.relative_to(ROOT)) for p in module_paths().values() if layer_of(p, layers) is None]
    assert missing == [], f"place these in the layer table of docs/architecture.md: {missing}"


def test_the_layer_table_names_only_files_that_exist(layers: dict[str, int]) -> None:
    assert [entry for entry in layers if not (ROOT / entry).exists()] == []


def test_no_import_runs_upward(layers: dict[str, int]) -> None:
    assert upward_imports(layers) == []


def test_an_upward_import_is_found(layers: dict[str, int]) -> None:
    # the check itself: the same sources with one upward import added (the engine importing the writer, inside a
    # function and in the relative form) must be reported, and nothing else
    polars_engine = (PACKAGE / "engine" / "polars_engine.py").read_text(encoding="utf-8")
    hostile = polars_engine + "\n\ndef _leak():\n    from ..publish.table import write_table\n"
    engine, publish = layers["dpcli/engine/"], layers["dpcli/publish/"]
    assert upward_imports(layers, {"dpcli.engine.polars_engine": hostile}) == [
        f"dpcli.engine.polars_engine ({engine}) -> dpcli.publish.table ({publish})"
    ]


def test_the_cli_is_the_top(layers: dict[str, int]) -> None:
    # the CLI imports the library and nothing imports the CLI but the entry point (and the CLI itself); above it only
    # the package's face, which re-exports the library's names
    assert layers["dpcli/cli/"] == max(v for k, v in layers.items() if k != "dpcli/__init__.py")
    modules = module_paths()
    importers = sorted(
        n for n, p in modules.items()
        if not n.startswith("dpcli.cli")
        and any(m.startswith("dpcli.cli") for m in imported_modules(p.read_text(encoding="utf-8"), n, modules))
    )
    assert importers == ["dpcli.__main__"]


def test_the_package_root_holds_only_its_face_entry_point_and_errors() -> None:
    # every other module lives in the sub-package of its concern (docs/architecture.md, "The packages")
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py", "errors.py"]


def test_every_sub_package_is_one_layer(layers: dict[str, int]) -> None:
    # a layer is a folder: the table names sub-packages (and the root's three files), never a single module inside
    folders = {p.parent.relative_to(ROOT).as_posix() + "/" for p in PACKAGE.glob("*/__init__.py")}
    entries = set(layers)
    assert folders <= entries, sorted(folders - entries)
    assert entries - folders == {"dpcli/__init__.py", "dpcli/__main__.py", "dpcli/errors.py"}


def import_graph(sources: dict[str, str] | None = None) -> dict[str, set[str]]:
    """Each dpcli module's imports of other dpcli modules (all of them: inside functions and TYPE_CHECKING too)."""
    modules = module_paths()
    return {
        name: imported_modules(sources.get(name) if sources and name in sources else path.read_text(encoding="utf-8"),
                               name, modules) - {name}
        for name, path in modules.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected sets of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def private_imports(sources: dict[str, str] | None = None) -> list[str]:
    """Every ``from dpcli.X import _name`` in the package: a private name taken across modules (a test may take
    one of the module it tests; the package may not)."""
    modules = module_paths()
    bad = []
    for name, path in modules.items():
        source = sources.get(name) if sources and name in sources else path.read_text(encoding="utf-8")
        bad.extend(
            f"{name} takes {alias.name} from {node.module}"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and ((node.module or "").startswith("dpcli") or node.level)
            for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__")
        )
    return bad


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_an_import_circle_is_found() -> None:
    # the check itself: the writer importing the engine back, inside a function, makes a circle of the two
    output = (PACKAGE / "publish" / "table.py").read_text(encoding="utf-8")
    engine = (PACKAGE / "engine" / "polars_engine.py").read_text(encoding="utf-8")
    hostile = engine + "\n\ndef _leak():\n    from dpcli.publish.table import write_table\n"
    found = circles(import_graph({"dpcli.publish.table": output, "dpcli.engine.polars_engine": hostile}))
    assert any({"dpcli.publish.table", "dpcli.engine.polars_engine"} <= set(group) for group in found), found


def test_no_private_name_is_imported_across_modules() -> None:
    assert private_imports() == []


def test_a_private_import_is_found() -> None:
    randomize = (PACKAGE / "run" / "randomize.py").read_text(encoding="utf-8")
    hostile = randomize + "\n\ndef _leak():\n    from dpcli.specs.model import _secret\n"
    found = private_imports({"dpcli.run.randomize": hostile})
    assert found == ["dpcli.run.randomize takes _secret from dpcli.specs.model"]


def borrowed_names(sources: dict[str, str] | None = None) -> list[str]:
    """Every ``from dpcli.x.y import name`` where dpcli.x.y does not define ``name`` but only imports it: a module
    hands on another's name (a sub-package's ``__init__.py``, its face, may; a module may not). So a moved name
    leaves no shim behind, and the imports show where each name lives."""
    modules = module_paths()
    defined: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found: set[str] = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    elts = target.elts if isinstance(target, ast.Tuple) else [target]
                    found |= {e.id for e in elts if isinstance(e, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found.add(node.target.id)
        defined[name] = found
    bad = []
    for name, path in modules.items():
        source = sources.get(name) if sources and name in sources else path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules):
                continue
            if modules[node.module].name == "__init__.py":
                continue
            bad.extend(
                f"{name} takes {alias.name} from {node.module}"
                for alias in node.names
                if f"{node.module}.{alias.name}" not in modules and alias.name not in defined[node.module]
            )
    return bad


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    assert borrowed_names() == []


def test_a_borrowed_name_is_found() -> None:
    # the check itself: the writer taking the plan's Fraction (which dpcli.plan.model only imports) is reported
    table = (PACKAGE / "publish" / "table.py").read_text(encoding="utf-8")
    hostile = table + "\n\ndef _leak():\n    from dpcli.plan.model import Fraction\n"
    found = borrowed_names({"dpcli.publish.table": hostile})
    assert found == ["dpcli.publish.table takes Fraction from dpcli.plan.model"]
