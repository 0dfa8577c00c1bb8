"""Reading a release spec: YAML text or a spec file -> frozen, typed, validated ``Spec`` (built by
``dpcli.specs.rules``).

The loader is deliberately strict:
- every plain YAML scalar is read as *text* (no implicit booleans, octals, sexagesimals or floats: YAML 1.1's
  ``no``, ``010`` and ``1:30`` stay the strings they look like), and numbers are parsed exactly from that text
  into ``Fraction``s, so ``0.1`` in a spec is exactly 1/10, within size limits (``MAX_NUMBER_DIGITS``);
- aliases and anchors (billion laughs), explicit tags (``!!python/object``, ``!!float``), duplicate keys, lone
  surrogates, and files over ``MAX_SPEC_BYTES`` or not regular files (a FIFO) are refused;
- every error is one line that starts with the spec file (when read from one) and the YAML path of the offending
  field, e.g. ``spec.yaml: statistics[2].column: 'incme' is not a declared column``.

Nothing here reads data: a spec is public, person-written knowledge (bounds, bins, categories, budget split).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat as _stat
from collections.abc import Callable, Hashable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from dpcli.errors import SpecError
from dpcli.specs.fields import RuleError
from dpcli.specs.model import Spec
from dpcli.specs.rules import ErrorCollector, build_spec

# A spec file holds at most this many bytes: a 10^7-bin grid is one line, and 1 MiB holds ~100,000 category keys
# (ICD-10-CM, among the longest public code lists, has ~74,000 codes of up to 8 characters).
MAX_SPEC_BYTES = 1 << 20


# ---------------------------------------------------------------------------------------------------------------
# Strict YAML


_ALLOWED_TAGS = {"tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


def _mark(node_or_event: Any) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f"line {mark.line + 1}" if mark is not None else ""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with no implicit typing, no aliases/anchors, no explicit tags and no duplicate keys."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        # types-PyYAML leaves Parser.peek_event unannotated: it returns the next event, not consumed
        peek_event: Callable[[], yaml.Event] = self.peek_event
        event = peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise SpecError(_mark(event), "YAML aliases are not allowed in a spec")
        if getattr(event, "anchor", None) is not None:
            raise SpecError(_mark(event), "YAML anchors are not allowed in a spec")
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in ("!",) and tag not in _ALLOWED_TAGS:
            raise SpecError(_mark(event), "explicit YAML tags are not allowed in a spec")
        return super().compose_node(parent, index)

    # any node (wider than SafeConstructor's MappingNode): the map constructor below hands over the node it is given
    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Hashable, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise SpecError(_mark(node), "expected a mapping")
        result: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError(_mark(key_node), "mapping keys must be plain names")
            key = self.construct_object(key_node, deep=deep)
            if key in result:
                raise SpecError(_mark(key_node), f"duplicate key '{key}'")
            result[key] = self.construct_object(value_node, deep=deep)
        return result


# No implicit resolvers: every plain scalar is a str. Numbers are parsed exactly by the validators below.
_StrictLoader.yaml_implicit_resolvers = {}


def _construct_map(loader: _StrictLoader, node: yaml.Node) -> dict[Hashable, Any]:
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def load_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except SpecError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(where, f"invalid YAML: {problem}") from None
    except RecursionError:
        raise SpecError("", "invalid YAML: nested too deeply") from None


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def no_surrogates(doc: Any) -> None:
    """Refuse a lone surrogate anywhere (a double-quoted "\\ud800"): it is not a character, so no UTF-8 output, path
    or terminal can hold it, and it would otherwise fail only when the table is written (exit 1, after the spend). UTF-8
    text cannot hold one, so only a YAML escape makes one; a character beyond U+FFFF is written "\\U0001F600"."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            found = _SURROGATE.search(node)
            if found:
                raise SpecError(
                    path, f"holds a lone surrogate (\\u{ord(found.group()):04x}), which is not a Unicode character"
                )
        elif isinstance(node, dict):
            if any(isinstance(key, str) and _SURROGATE.search(key) for key in node):
                raise SpecError(path, "a key holds a lone surrogate, which is not a Unicode character")
            # reversed onto the stack, so the first one in document order is reported
            stack.extend(reversed([(f"{path}.{key}" if path else str(key), value) for key, value in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(f"{path}[{i}]", item) for i, item in enumerate(node)]))


def parse_spec(text: str, source: str = "<string>", base_dir: Path | None = None) -> Spec:
    """Validate spec text and return the frozen Spec. Raises SpecError (exit 2) with a one-line message: the first
    error found (``spec_errors`` gives them all)."""
    spec = _parse(text, source, base_dir, ErrorCollector(None))
    if spec is None:  # without a collector the first error is raised: never reached
        raise SpecError("", "invalid spec")
    return spec


def parse_errors(text: str, base_dir: Path | None = None) -> list[SpecError]:
    """Every error of spec text (none: it is valid): field rules first, then the cross-field rules (RuleError)."""
    errors: list[SpecError] = []
    try:
        _parse(text, "<string>", base_dir, ErrorCollector(errors))
    except SpecError as exc:  # an error that leaves nothing to check further (YAML, size, a missing section)
        errors.append(exc)
    return sorted(errors, key=lambda e: isinstance(e, RuleError) and e.rule == "cross-field")


def _parse(text: str, source: str, base_dir: Path | None, out: ErrorCollector) -> Spec | None:
    raw_bytes = text.encode("utf-8", "surrogatepass")
    if len(raw_bytes) > MAX_SPEC_BYTES:
        raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
    doc = load_yaml(text)
    no_surrogates(doc)
    return build_spec(doc, source, base_dir, hashlib.sha256(raw_bytes).hexdigest(), out)


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file. Paths inside it are relative to the spec's directory. Every error starts with
    the file as given, then the YAML path: ``spec.yaml: statistics[2].column: 'incme' is not a declared column``."""
    p = Path(path)
    try:
        data, text = read_spec_text(path)
        spec = parse_spec(text, source=str(p), base_dir=p.parent)
    except SpecError as exc:
        raise exc.in_file(printable(str(path))) from None
    # hash the bytes as read (BOM included) so the metadata names exactly this file
    return _replace_hash(spec, hashlib.sha256(data).hexdigest())


def spec_errors(path: str | Path) -> list[SpecError]:
    """Every error of the spec file at ``path``, for ``dpcli check``: empty when ``load_spec(path)`` succeeds, else
    one SpecError per problem found, each naming the file (``str(e)`` is ``file: yaml.path: message``), the field
    rules' errors first in document order, then the cross-field rules' (``RuleError``: declared columns, bounds and
    bin order, budget sums, ...). A problem that stops reading (an unreadable file, invalid YAML, a missing section)
    is the only error. The planner's limits (dpcli.plan.model.make_plan) are not checked here."""
    p = Path(path)
    try:
        _, text = read_spec_text(path)
    except SpecError as exc:
        return [exc.in_file(printable(str(path)))]
    return [e.in_file(printable(str(path))) for e in parse_errors(text, base_dir=p.parent)]


def read_spec_text(path: str | Path) -> tuple[bytes, str]:
    if str(path) == "-":
        raise SpecError("", "a spec is read from a file, not from standard input: give its path")
    data = _read_spec_file(Path(path))
    try:
        return data, data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError("", "the spec is not UTF-8 text") from None


def _read_spec_file(p: Path) -> bytes:
    """The spec file's bytes, from a regular file only. It is opened without blocking and checked before anything is
    read: opening a FIFO for reading waits for a writer (``dpcli plan fifo`` hung), and a device can stream forever."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise SpecError("", "is a directory, not a spec file") from None
        raise SpecError("", f"cannot read the spec: {exc.strerror or 'unreadable'}") from None
    try:
        info = os.fstat(fd)
        if _stat.S_ISDIR(info.st_mode):
            raise SpecError("", "is a directory, not a spec file")
        if not _stat.S_ISREG(info.st_mode):
            raise SpecError("", "is not a regular file (a FIFO, device or socket cannot be a spec)")
        if info.st_size > MAX_SPEC_BYTES:
            raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
        chunks, size = [], 0
        while size <= MAX_SPEC_BYTES:  # up to one byte over the limit: the file may have grown since fstat
            chunk = os.read(fd, MAX_SPEC_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise SpecError("", f"cannot read the spec: {exc.strerror or 'unreadable'}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
    return data


def printable(text: str) -> str:
    """``text`` on one printable line: control characters and lone surrogates (undecodable bytes of a file name)
    escaped, so a file name cannot break a one-line message."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _replace_hash(spec: Spec, digest: str) -> Spec:
    return replace(spec, sha256=digest)


def is_synth_spec(path: str | Path) -> bool:
    """Whether the file is a synth spec (a top-level ``synth:`` and no ``statistics:``), for the commands that take
    either kind (plan, check). A file that cannot be read or parsed is not: the release loader then reports why."""
    try:
        _, text = read_spec_text(path)
        doc = load_yaml(text)
    except SpecError:
        return False
    return isinstance(doc, dict) and "synth" in doc and "statistics" not in doc
