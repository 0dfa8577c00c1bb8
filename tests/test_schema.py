"""`dpcli schema` (JSON Schema of spec v1) against the loader, and a fuzz of the loader.

- the schema is a valid draft 2020-12 schema, and `dpcli schema` prints exactly it;
- every spec the loader accepts here validates against the schema (as PyYAML, a YAML 1.1 tool, types it);
- documents generated *from the schema* (a small interpreter of the keywords the schema uses; hypothesis-jsonschema
  0.23 does not run on this project's hypothesis 6.17x: `'many' object has no attribute 'more'`), then repaired for
  the cross-field rules JSON Schema cannot express (the list is in dpcli/schema.py's docstring; the repair keeps
  the document schema-valid, which is asserted), are accepted by the loader;
- no input at all (text, bytes, mutated valid specs) gets anything but SpecError out of the loader and the planner.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

jsonschema = pytest.importorskip("jsonschema")
from jsonschema import Draft202012Validator  # noqa: E402

from dpcli.accounting import epsilon_delta_to_rho, format_exact, parse_exact  # noqa: E402
from dpcli.errors import SpecError  # noqa: E402
from dpcli.plan import make_plan  # noqa: E402
from dpcli.schema import NUMBER_PATTERN, schema_json, spec_schema  # noqa: E402
from dpcli.spec import (  # noqa: E402
    MAX_ABS_BOUND,
    MAX_CELLS,
    MAX_GRID_UNITS,
    MAX_RELEASE_EPSILON,
    MAX_RHO,
    MAX_TOTAL_DIGITS,
    OUTPUT_COLUMNS,
    _load_yaml,
    default_precision,
    load_spec,
    parse_spec,
)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = spec_schema()
VALIDATOR = Draft202012Validator(SCHEMA)


def schema_errors(doc: object) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:120]}" for e in VALIDATOR.iter_errors(doc)]


# ---------------------------------------------------------------------------------------------------------------
# The schema itself


def test_schema_is_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_dpcli_schema_prints_it() -> None:
    r = subprocess.run([sys.executable, "-m", "dpcli", "schema"], capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stderr == b""
    assert json.loads(r.stdout) == SCHEMA
    assert r.stdout.decode() == schema_json()


@pytest.mark.parametrize(
    "text, ok",
    [("0.5", True), ("1e-3", True), ("-2", True), (".5", True), ("5.", True), ("1/3", True), ("1E+400", False),
     ("0", True), ("1.0e-06", True), ("1e401", False), ("nan", False), ("inf", False), ("0x10", False),
     ("1_000", False), ("١٢٣", False), ("", False), ("1/0", False), ("010", False), ("-00.5", False), ("1:30", False),
     # the limits: 40 significant digits, 1e-40 <= |x| < 1e40, or p/q of 40 digits each
     ("1e-40", True), ("-1.2345678901234567e-40", True), ("9.9e39", True), ("1e-41", False), ("1e40", False),
     ("1e-390", False), ("0." + "1" * 41, False), ("1" * 41, False), ("1/" + "9" * 40, True), ("1" * 40 + "/7", True),
     ("1/" + "1" * 41, False), ("4" * 20 + "." + "4" * 20, True)],
)
def test_number_text_pattern_is_the_loaders_grammar(text: str, ok: bool) -> None:
    import re

    from dpcli.spec import _number

    assert bool(re.search(NUMBER_PATTERN, text)) is ok
    try:
        _number("x", text)
        loader_ok = True
    except SpecError:
        loader_ok = False
    assert loader_ok is ok


@settings(max_examples=300, deadline=None)
@given(st.from_regex(NUMBER_PATTERN, fullmatch=True))
def test_every_text_the_number_pattern_takes_is_a_number_the_loader_takes(text: str) -> None:
    from dpcli.spec import _number, number_within_limits

    assert number_within_limits(_number("x", text))


def spec_doc(**overrides: object) -> dict:
    doc = {
        "version": 1,
        "dataset": "people",
        "privacy": {"epsilon": 1},
        "columns": {"age": {"type": "int", "bounds": [0, 100]}},
        "statistics": [{"name": "n", "kind": "count"}],
    }
    doc.update(overrides)
    return doc


# Specs the loader accepts, as their authors would write them: each must validate against the schema as a YAML
# tool types it (PyYAML here: YAML 1.1, so `1e-3` is a string and `yes` a boolean; the schema allows both).
ACCEPTED_SPECS = [
    (ROOT / "configs" / "example.yaml").read_text(),
    """\
version: '1'
dataset: 2020
csv: {quoted_line_breaks: 'false'}
privacy: {unit: row, neighbours: replace, epsilon: 1e-3}
columns:
  age: {type: int, bounds: [-5, 1e3], impute: 7}
  inc: {type: float, bounds: ['0', 1/2], precision: 0.001, impute: 0.25}
  sex: {type: category, categories: [yes, no, 010, '1:30', Other], other: Other, impute: yes}
  emp: {type: bool, impute: true}
statistics:
  - {name: n, kind: count, epsilon: 0.0001}
  - {name: h, kind: histogram, column: age, bins: {start: -5, stop: 1000, step: 5}, by: [sex, emp], epsilon: 1/3000}
  - {name: s, kind: sum, column: inc, epsilon: '0.0002'}
  - {name: m, kind: mean, column: inc, by: [emp], epsilon: 1e-4}
  - {name: c, kind: histogram, column: sex, epsilon: 0.0001}
""",
    """\
version: 1
dataset: z
csv: {quoted_line_breaks: true}
privacy: {rho: 0.5, delta: 1e-6}
columns:
  x: {type: int, bounds: [0, 10]}
statistics:
  - {name: a, kind: sum, column: x, mechanism: gaussian, weight: 3}
  - {name: b, kind: histogram, column: x, bins: [0, 5, 11]}
""",
    """\
version: 1
dataset: z
privacy: {epsilon: 2, delta: 0.00001}
columns:
  x: {type: float, bounds: [0, 10]}
statistics:
  - {name: a, kind: mean, column: x, mechanism: gaussian}
""",
    """\
version: 1
dataset: z
privacy: {}
columns:
  x: {type: int, bounds: [0, 10]}
statistics:
  - {name: a, kind: count, rho: 0.1, mechanism: gaussian}
  - {name: b, kind: count, rho: 0.2}
""",
]


@pytest.mark.parametrize("text", ACCEPTED_SPECS)
def test_specs_the_loader_accepts_validate_against_the_schema(text: str) -> None:
    parse_spec(text)
    assert schema_errors(yaml.safe_load(text)) == []


@pytest.mark.parametrize(
    "change, message",
    [
        ({"privacy": {"epsilon": 0}}, "privacy"),
        ({"privacy": {"epsilon": 101}}, "privacy"),
        ({"privacy": {"epsilon": "nan"}}, "privacy"),
        ({"privacy": {"epsilon": 1, "seed": 4}}, "privacy"),
        ({"privacy": {"epsilon": 1, "rho": 1}}, "privacy"),
        ({"sensitivity": 1}, ""),
        ({"statistics": []}, "statistics"),
        ({"statistics": [{"name": "n", "kind": "count", "scale": 2}]}, "statistics/0"),
        ({"statistics": [{"name": "n", "kind": "count", "column": "age"}]}, "statistics/0"),
        ({"statistics": [{"name": "n", "kind": "sum"}]}, "statistics/0"),
        ({"statistics": [{"name": "n", "kind": "count", "weight": 1, "epsilon": 1}]}, "statistics/0"),
        ({"columns": {"age": {"type": "int", "bounds": [0.5, 100]}}}, "columns/age"),
        ({"columns": {"age": {"type": "int", "bounds": [0, 1e16]}}}, "columns/age"),
        ({"columns": {"age": {"type": "category", "categories": ["a", "a"]}}}, "columns/age"),
        ({"columns": {"age": {"type": "bool", "other": "true"}}}, "columns/age"),
        ({"columns": {}}, "columns"),
        ({"version": 2}, "version"),
        ({"dataset": "a b"}, "dataset"),
        ({"csv": {"quoted_line_breaks": "yes"}}, "csv"),
        ({"csv": {"quoted_line_breaks": 1}}, "csv"),
        ({"csv": {"separator": ";"}}, "csv"),
        ({"csv": True}, "csv"),
        ({"columns": {"age": {"type": "category", "categories": ["a", "b\ufffd"]}}}, "columns/age"),
        ({"columns": {"age": {"type": "category", "categories": ["a"], "other": "\ufffd"}}}, "columns/age"),
    ],
)
def test_schema_refuses_what_the_loader_refuses(change: dict, message: str) -> None:
    doc = spec_doc(**change)
    errors = schema_errors(doc)
    assert errors and any(e.startswith(message) for e in errors), errors
    with pytest.raises(SpecError):
        parse_spec(yaml.safe_dump(doc))


# ---------------------------------------------------------------------------------------------------------------
# Documents generated from the schema


def strategy(schema: dict, root: dict = SCHEMA) -> st.SearchStrategy:
    """A hypothesis strategy for the JSON Schema keywords dpcli's schema uses, filtered by the real validator
    wherever a sub-schema has keywords this interpreter does not generate (not, if/then/else, dependentSchemas)."""
    if "$ref" in schema:
        return st.deferred(lambda: strategy(root["$defs"][schema["$ref"].split("/")[-1]], root))
    base = _structural(schema, root)
    if any(k in schema for k in ("not", "allOf", "dependentSchemas", "oneOf", "uniqueItems")):
        check = Draft202012Validator({**schema, "$defs": root["$defs"]})
        base = base.filter(check.is_valid)
    return base


def _structural(schema: dict, root: dict) -> st.SearchStrategy:
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            rest = {k: v for k, v in schema.items() if k != key}
            return st.one_of([strategy({**rest, **branch}, root) for branch in schema[key]])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if isinstance(extra, dict):
            names = st.from_regex(schema["propertyNames"]["pattern"], fullmatch=True)
            return st.dictionaries(names, strategy(extra, root), min_size=schema.get("minProperties", 0), max_size=4)
        check = Draft202012Validator({**schema, "$defs": root["$defs"]}).is_valid

        @st.composite
        def obj(draw: st.DrawFn) -> dict:
            # values first, then which optional ones are present: redrawn until the keywords this interpreter does
            # not generate (if/then/else, dependentSchemas, not) hold, so the filter above rarely rejects
            values = {k: draw(strategy(props[k], root)) for k in props}
            for _ in range(25):
                out = {k: values[k] for k in props if k in required or draw(st.booleans())}
                if check(out):
                    return out
            assume(False)

        return obj()
    if kind == "array":
        items = strategy(schema["items"], root)
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems", lo + 4)
        if schema.get("uniqueItems"):
            return st.lists(items, min_size=lo, max_size=hi, unique_by=lambda x: (type(x) is bool, x))
        return st.lists(items, min_size=lo, max_size=hi)
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return st.text(min_size=schema.get("minLength", 0), max_size=12)
    if kind == "boolean":
        return st.booleans()
    if kind in ("number", "integer"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum")
        if "exclusiveMinimum" in schema:
            int_lo = int(Fraction(schema["exclusiveMinimum"]) // 1) + 1
        else:
            int_lo = None if lo is None else int(-(-Fraction(lo) // 1))
        int_hi = None if hi is None else int(Fraction(hi) // 1)
        ints = st.nothing() if None not in (int_lo, int_hi) and int_lo > int_hi else st.integers(int_lo, int_hi)
        if kind == "integer":
            return ints
        floats = st.floats(
            min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False,
            exclude_min="exclusiveMinimum" in schema,
        )
        return st.one_of(ints, floats)
    if isinstance(kind, list) or kind is None:
        return st.nothing()
    raise AssertionError(f"schema keyword combination not generated: {schema}")


def loader_text(value: object) -> str:
    """The text dpcli's loader reads for a value dumped to YAML (numbers and booleans included)."""
    return _load_yaml(yaml.safe_dump({"k": value}, allow_unicode=True))["k"]


def exact(value: object) -> Fraction | None:
    try:
        return parse_exact(loader_text(value))
    except ValueError:
        return None


def fit(value: object, lo: Fraction, hi: Fraction, whole: bool = False, fallback: object = 0) -> object:
    """``value`` if the loader reads it within [lo, hi] (and whole), else ``fallback``."""
    x = exact(value)
    if x is None or not lo <= x <= hi or (whole and x.denominator != 1):
        return fallback
    return value


def repair(doc: dict) -> dict:
    """Enforce the loader's cross-field rules (dpcli/schema.py's list), staying inside the schema."""
    columns = doc["columns"]
    big = MAX_ABS_BOUND
    for name, col in columns.items():
        if col["type"] in ("int", "float"):
            whole = col["type"] == "int"
            lo_raw, hi_raw = (fit(b, -big, big, whole, fallback=i) for i, b in enumerate(col["bounds"]))
            lo, hi = exact(lo_raw), exact(hi_raw)
            if not lo < hi:
                lo_raw, hi_raw, lo, hi = 0, 1, Fraction(0), Fraction(1)
            col["bounds"] = [lo_raw, hi_raw]
            if col["type"] == "float":
                p = exact(col["precision"]) if "precision" in col else default_precision(lo, hi)
                if p is None or p <= 0 or not _grid_ok(lo, hi, p):
                    col.pop("precision", None)
                    if not _grid_ok(lo, hi, default_precision(lo, hi)):
                        col["bounds"] = [lo_raw, hi_raw] = [0, 1]
                        lo, hi = Fraction(0), Fraction(1)
            if "impute" in col:
                col["impute"] = fit(col["impute"], lo, hi, whole, fallback=lo_raw)
        elif col["type"] == "category":
            seen, keys = set(), []
            for c in col["categories"]:
                if loader_text(c) not in seen:
                    seen.add(loader_text(c))
                    keys.append(c)
            col["categories"] = keys
            for field in ("impute", "other"):
                if field in col and loader_text(col[field]) not in seen:
                    col[field] = keys[0]
    numeric = [n for n, c in columns.items() if c["type"] in ("int", "float")]
    keyed = [n for n, c in columns.items() if c["type"] in ("category", "bool") and n not in OUTPUT_COLUMNS]
    if not numeric:
        columns["rep_num"] = {"type": "int", "bounds": [0, 10]}
        numeric = ["rep_num"]

    names: set[str] = set()
    for i, s in enumerate(doc["statistics"]):
        if s["name"] in names:
            s["name"] = f"{s['name'][:100]}_{i}"
        names.add(s["name"])
        kind = s["kind"]
        if kind in ("sum", "mean") and s["column"] not in numeric:
            s["column"] = numeric[0]
        if kind == "histogram":
            if s["column"] not in columns or s["column"] in OUTPUT_COLUMNS:
                s["column"] = next((n for n in numeric if n not in OUTPUT_COLUMNS), None) or _add(columns, numeric)
            col = columns[s["column"]]
            if col["type"] in ("int", "float"):
                s["bins"] = _fix_bins(s.get("bins"), col)
            else:
                s.pop("bins", None)
        if "by" in s:
            usable = [k for k in keyed if k != s.get("column")]
            # an undeclared name is pointed at a declared category/bool column (there is no way to say so in JSON
            # Schema), picked by its length so different names reach different columns
            by = list(dict.fromkeys(b if b in usable else usable[len(b) % len(usable)] for b in s["by"])) if usable else []
            if by:
                s["by"] = by
            else:
                del s["by"]
        if _cells(s, columns) > MAX_CELLS:
            s.pop("by", None)
    _fix_budget(doc)
    return doc


def _add(columns: dict, numeric: list) -> str:
    columns["rep_hist"] = {"type": "int", "bounds": [0, 10]}
    numeric.append("rep_hist")
    return "rep_hist"


def _grid_ok(lo: Fraction, hi: Fraction, p: Fraction) -> bool:
    glo, ghi = -((-lo / p).__floor__()), (hi / p).__floor__()
    return glo < ghi and max(abs(glo), abs(ghi)) <= MAX_GRID_UNITS


def _fix_bins(bins: object, col: dict) -> object:
    if isinstance(bins, list):
        values = {}
        for b in bins:
            x = exact(b)
            if x is not None and x not in values:
                values[x] = b
        if len(values) >= 2:
            return [values[x] for x in sorted(values)]
    elif isinstance(bins, dict):
        start, stop, step = (exact(bins[k]) for k in ("start", "stop", "step"))
        if None not in (start, stop, step) and step > 0 and start < stop:
            n = (stop - start) / step
            if n.denominator == 1 and n <= MAX_CELLS:
                return bins
    return list(col["bounds"])


def _cells(s: dict, columns: dict) -> int:
    cells = 1
    for b in s.get("by", []):
        cells *= 2 if columns[b]["type"] == "bool" else len(columns[b]["categories"])
    if s["kind"] == "histogram":
        col = columns[s["column"]]
        if col["type"] == "bool":
            cells *= 2
        elif col["type"] == "category":
            cells *= len(col["categories"])
        elif isinstance(s["bins"], list):
            cells *= len(s["bins"]) - 1
        else:
            b = s["bins"]
            cells *= int((exact(b["stop"]) - exact(b["start"])) / exact(b["step"]))
    return cells


# Ranges of the numbers the schema checks only for form when they are written as strings.
TINY = Fraction(1, 10**400)
RANGES = {"epsilon": (Fraction(1, 10**6), MAX_RELEASE_EPSILON), "rho": (Fraction(1, 10**12), MAX_RHO),
          "delta": (TINY, Fraction(1, 100)), "weight": (TINY, Fraction(10**400))}


def _fix_budget(doc: dict) -> None:
    p, stats = doc["privacy"], doc["statistics"]
    for part in (p, *stats):
        for key, (lo, hi) in RANGES.items():
            if key in part:
                part[key] = fit(part[key], lo, hi, fallback=f"{format_exact(hi) if key == 'delta' else 1}")
    gaussian = any(s.get("mechanism") == "gaussian" for s in stats)
    if "rho" in p:
        mode = "rho"
    elif "epsilon" in p and "delta" in p:
        mode = "rho" if gaussian else "epsilon"
        if not gaussian:
            del p["delta"]
    elif "epsilon" in p:
        mode = "epsilon"
    elif all("rho" in s for s in stats):
        mode = "rho"
    elif all("epsilon" in s for s in stats) and not gaussian:
        mode = "epsilon"
    else:
        p.pop("delta", None)
        p["epsilon"], mode = 1, "epsilon"
    other = "epsilon" if mode == "rho" else "rho"
    for s in stats:
        s.pop(other, None)
        if mode == "epsilon" and s.get("mechanism") == "gaussian":
            s["mechanism"] = "laplace"
    if mode == "rho" and "rho" in p:
        budget = exact(p["rho"])
    elif mode == "rho" and "epsilon" in p:
        budget = epsilon_delta_to_rho(exact(p["epsilon"]), exact(p["delta"]))
    elif mode == "epsilon" and "epsilon" in p:
        budget = exact(p["epsilon"])
    else:
        budget = MAX_RHO if mode == "rho" else MAX_RELEASE_EPSILON
    shares = [exact(s[mode]) for s in stats if mode in s]
    if shares and (len(shares) < len(stats) or not _total_ok(shares) or sum(shares) > budget):
        for s in stats:
            s.pop(mode, None)
        if mode not in p and not (mode == "rho" and "epsilon" in p):
            p[mode] = 1
    if not any(mode in s for s in stats) and not _total_ok([exact(s.get("weight", 1)) for s in stats]):
        for s in stats:
            s.pop("weight", None)


def _total_ok(values: list) -> bool:
    """The loader's limit on a sum of weights or shares: every partial sum within MAX_TOTAL_DIGITS digits."""
    cap, total = 10**MAX_TOTAL_DIGITS, Fraction(0)
    for x in values:
        total += x
        if abs(total.numerator) >= cap or total.denominator >= cap:
            return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(strategy(SCHEMA))
def test_documents_generated_from_the_schema_are_accepted_by_the_loader(doc: dict) -> None:
    assert schema_errors(doc) == [], "the generator left the schema"
    doc = repair(json.loads(json.dumps(doc)))
    assert schema_errors(doc) == [], "the repair left the schema"
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    assume(len(text.encode()) < 100_000)
    try:
        spec = parse_spec(text)
    except SpecError as exc:  # pragma: no cover - a disagreement between the schema and the loader
        raise AssertionError(f"schema-valid spec refused: {exc}\n{text}") from None
    try:
        make_plan(spec)  # may refuse a noise scale over 2^40 grid steps (a plan limit, not a schema rule) ...
    except SpecError:
        pass  # ... but nothing else may escape


# ---------------------------------------------------------------------------------------------------------------
# Fuzzing the loader: nothing but SpecError escapes (load_spec, parse_spec, and the planner the CLI runs next)


def only_spec_errors(text: str) -> None:
    try:
        make_plan(parse_spec(text))
    except SpecError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_text(text: str) -> None:
    only_spec_errors(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_bytes_through_load_spec(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "spec.yaml"
        path.write_bytes(data)
        try:
            make_plan(load_spec(path))
        except SpecError:
            pass


VALID = [t for t in ACCEPTED_SPECS]
TOKENS = ["&a ", "*a", "!!python/object:os.system ", "!!float ", "<<: ", "? ", ": ", "- ", "[", "]", "{", "}", ",",
          "'", '"', "#", "|", ">", "\t", "\n", "\x00", "\ufeff", "\u2028", "%YAML 1.1\n", "---\n", "...\n", "~",
          "1e400", "-0", "nan", ".inf", "0x10", "1_0", "1/0", "99999999999999999999", "  ", "\\", "@", "`"]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "dupline", "swaplines"]))
        i = draw(st.integers(0, len(text)))
        if op == "insert":
            text = text[:i] + draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=3))) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 12)):]
        elif op == "replace":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i + draw(st.integers(1, 6)):]
        else:
            lines = text.split("\n")
            a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            if op == "dupline":
                lines.insert(a, lines[b])
            else:
                lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    return text


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_fuzz_mutated_valid_specs(text: str) -> None:
    only_spec_errors(text)


def test_fuzz_seeds_are_valid_and_plannable() -> None:
    for text in VALID:
        make_plan(parse_spec(text))
