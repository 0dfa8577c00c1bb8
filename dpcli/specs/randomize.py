"""The spec of ``dpcli randomize``: a release spec's top level (dataset, input, output, ledger, csv, privacy,
columns) with ``randomize: {columns: [...]}`` in place of ``statistics:`` (docs/spec.md, "Randomized response").

Its rules beyond the shared fields: ``privacy.neighbours: replace`` stated (the output has one row per input row, so
it is ε-DP only when a neighbour changes a row, never adds or removes one), a row unit, ``privacy.epsilon`` alone
(ε per record, split evenly over the chosen columns), and chosen columns that are declared category or bool columns
with declared keys.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcli.core.locations import is_ledger_url
from dpcli.errors import SpecError
from dpcli.specs.fields import Columns, Loaded, RuleError, Section, undeclared
from dpcli.specs.load import MAX_SPEC_BYTES, load_yaml, no_surrogates, printable, read_spec_text
from dpcli.specs.model import DEFAULT_MAX_RECORD_BYTES, Column, CsvDialect
from dpcli.specs.rules import ErrorCollector, build_column
from dpcli.specs.v1 import CSV, PRIVACY, TOP

# the input formats randomize reads (records in file order: a CSV, plain or compressed, by the release's line rules)
RANDOMIZE_FORMATS = ("csv", "csv.gz", "csv.zst")
# The exact sampler takes epsilon's numerator and denominator below 2**62 (dpcli.mechanisms.randomized_response)
_SAMPLER_LIMIT = 2**62

RANDOMIZE = Section(
    {"columns": Columns("declared category or bool columns to publish randomized, in output order")},
    required=("columns",),
    description="publish a local-DP copy of these columns: k-ary randomized response, one row per input row",
)
RANDOMIZE_TOP = Section(
    {
        **{key: TOP.fields[key] for key in ("version", "dataset", "name", "input", "output", "ledger", "input_format",
                                            "csv", "privacy", "columns")},
        "randomize": RANDOMIZE,
    },
    required=("version", "dataset", "privacy", "columns", "randomize"),
)


@dataclass(frozen=True)
class RandomizeSpec:
    version: str
    dataset: str
    epsilon: Fraction  # per record, over all chosen columns
    columns: tuple[Column, ...]  # the chosen columns, in output order
    input: Path | None = None
    output: Path | None = None
    ledger: Path | str | None = None
    source: str = "<string>"
    sha256: str = ""
    csv: CsvDialect = CsvDialect()  # noqa: RUF009 - frozen, so one shared default is safe (as in dpcli.specs.model)
    input_format: str | None = None
    neighbours: str = "replace"
    unit: str = "row"
    quoted_line_breaks: bool = False  # one physical line is one record (the reader, dpcli.engine.source, asks)
    name: str | None = None  # `name:`, as a release spec's (a release id is paid once per dataset and name)

    @property
    def field_names(self) -> tuple[str, ...] | None:
        """The fields of a CSV without a header line, in file order (None: the file's header names them)."""
        return None if self.csv.header else self.csv.names

    @property
    def column_epsilon(self) -> Fraction:
        """Each column's share of the record's epsilon (sequential composition over the columns)."""
        return self.epsilon / len(self.columns)


def parse_randomize_spec(text: str, source: str = "<string>", base_dir: Path | None = None,
                         digest: str | None = None) -> RandomizeSpec:
    raw_bytes = text.encode("utf-8", "surrogatepass")
    if len(raw_bytes) > MAX_SPEC_BYTES:
        raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
    doc = load_yaml(text)
    no_surrogates(doc)
    top = RANDOMIZE_TOP.keys("", doc if doc is not None else {})
    fields: Loaded = {
        key: RANDOMIZE_TOP.fields[key].load(key, top[key])
        for key in ("version", "dataset", "name", "input", "output", "ledger", "input_format")
        if key in top
    }
    csv = CSV.load("csv", top["csv"]) if "csv" in top else {}
    priv = PRIVACY.load("privacy", top["privacy"])
    epsilon = _privacy_rules(priv)
    raw_columns = top["columns"]
    if not isinstance(raw_columns, dict) or not raw_columns:
        raise SpecError("columns", "expected a mapping of at least one column")
    declared = {}
    for name, body in raw_columns.items():
        declared[name] = build_column(name, body, ErrorCollector(None))
    chosen = RANDOMIZE.load("randomize", top["randomize"])["columns"]
    columns = tuple(_chosen(i, name, declared, chosen) for i, name in enumerate(chosen))
    share = epsilon / len(columns)
    if share.numerator >= _SAMPLER_LIMIT or share.denominator >= _SAMPLER_LIMIT:
        raise RuleError("privacy.epsilon", "too many digits for the exact sampler: each column's share ε / "
                        f"{len(columns)} needs a numerator and denominator below 2^62 (write a shorter decimal)")
    fmt = fields.get("input_format")
    if fmt is not None and fmt not in RANDOMIZE_FORMATS:
        raise RuleError("input_format", f"randomize reads {', '.join(RANDOMIZE_FORMATS)} (rows in file order)")
    header = csv.get("header", True)
    if csv.get("quoted_line_breaks") == "true":
        raise RuleError("csv.quoted_line_breaks", "randomize reads one physical line as one record: a quoted line "
                        "break would let one record's bytes change how many records there are")
    if isinstance(header, tuple):
        missing = [c.name for c in columns if c.name not in header]
        if missing:
            raise RuleError("csv.header", f"chosen column(s) not among the fields it names: {', '.join(missing)}")
    base = base_dir if base_dir is not None else Path(".")

    def path_field(key: str) -> Path | None:
        p = fields.get(key)
        return None if p is None else Path("-") if p == "-" else base / p

    ledger = fields.get("ledger")
    return RandomizeSpec(
        version=fields["version"],
        dataset=fields["dataset"],
        epsilon=epsilon,
        columns=columns,
        input=path_field("input"),
        output=path_field("output"),
        ledger=ledger if ledger is not None and is_ledger_url(ledger) else path_field("ledger"),
        source=source,
        sha256=digest or hashlib.sha256(raw_bytes).hexdigest(),
        csv=CsvDialect(
            delimiter="\t" if csv.get("delimiter") == "tab" else csv.get("delimiter"),
            encoding=csv.get("encoding", "utf-8"),
            header=header is True,
            names=header if isinstance(header, tuple) else (None if header is True else tuple(raw_columns)),
            line_end=csv.get("line_end"),
            max_record_bytes=csv.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES),
        ),
        input_format=fmt,
        name=fields.get("name"),
    )


def _privacy_rules(priv: dict[str, Any]) -> Fraction:
    if priv.get("neighbours") != "replace":
        raise RuleError(
            "privacy.neighbours",
            "randomize publishes one row per input row, so it is ε-DP only under neighbours: replace (a row "
            "changed, never added or removed): state it",
        )
    if priv.get("unit", "row") != "row":
        raise RuleError("privacy.unit", "randomize protects each row: a person unit is not available (unit: row)")
    for key in ("delta", "rho"):
        if key in priv:
            raise RuleError(f"privacy.{key}", "randomize is pure ε-DP per record: give privacy.epsilon alone")
    if "epsilon" not in priv:
        raise RuleError("privacy.epsilon", "required: the ε each record's randomized cells spend together")
    return Fraction(priv["epsilon"])


def _chosen(i: int, name: str, declared: dict[str, Column | None], chosen: tuple[str, ...]) -> Column:
    path = f"randomize.columns[{i}]"
    column = declared.get(name)
    if column is None:
        raise RuleError(path, undeclared(name, declared))
    if column.type not in ("category", "bool") or column.open:
        raise RuleError(path, f"'{name}' is {'open' if column.open else column.type}: randomize publishes category "
                              "or bool columns with declared keys")
    if chosen.index(name) != i:
        raise RuleError(path, f"'{name}' is chosen twice")
    return column


def load_randomize_spec(path: str | Path) -> RandomizeSpec:
    """Read and validate a randomize spec file; errors name the file and the YAML path, as the release loader's."""
    p = Path(path)
    try:
        data, text = read_spec_text(path)
        return parse_randomize_spec(text, source=str(p), base_dir=p.parent, digest=hashlib.sha256(data).hexdigest())
    except SpecError as exc:
        raise exc.in_file(printable(str(path))) from None


def is_randomize_spec(path: str | Path) -> bool:
    """Whether the file is a randomize spec (a top-level ``randomize:`` and no ``statistics:``), for the commands
    that take either kind (plan, check, audit). A file that cannot be read or parsed is not: the release loader
    then reports why."""
    try:
        _, text = read_spec_text(path)
        doc = load_yaml(text)
    except SpecError:
        return False
    return isinstance(doc, dict) and "randomize" in doc and "statistics" not in doc
