"""One builder for the spec texts the tests write: ``spec_text(columns, statistics, privacy=..., ...)``.

Most tests need a valid spec that differs from a plain one in a column, a statistic or the privacy block; they say
only that difference. The text is the house's usual layout (flow mappings, one column or statistic a line), so a
test that reads a message naming a line or a field sees what it would in a hand-written file. Tests whose point is
the exact YAML (the loader's and the schema's tests, hostile spec files) keep their text as written.

>>> print(spec_text({"x": "{type: int, bounds: [0, 10]}"}, ["{name: s, kind: sum, column: x}"]), end="")
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  x: {type: int, bounds: [0, 10]}
statistics:
  - {name: s, kind: sum, column: x}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

PRIVACY = "unit: row, neighbours: add_remove, epsilon: 1"
AGE = {"age": "{type: int, bounds: [0, 100]}"}
COUNT = ("{name: n, kind: count}",)


def spec_text(
    columns: Mapping[str, str] | str = AGE,
    statistics: Sequence[str] | str = COUNT,
    *,
    privacy: str = PRIVACY,
    dataset: str = "toy",
    input: str | None = None,  # noqa: A002 - the spec's own field name
    csv: str | None = None,
    extra: str = "",
) -> str:
    """A spec v1 text: ``columns`` maps each name to its declaration (a flow mapping's text), ``statistics`` holds
    one flow mapping's text per statistic (either may also be given as the block's lines, as text); ``privacy`` is
    the inside of the privacy mapping (or the whole ``{...}``); ``input`` and ``csv`` (the inside of its mapping) are
    written when given, ``extra`` (whole lines) at the end."""
    lines = ["version: 1", f"dataset: {dataset}"]
    if input is not None:
        lines.append(f"input: {input}")
    if csv is not None:
        lines.append(f"csv: {{{csv}}}")
    lines.append(f"privacy: {privacy}" if privacy.startswith("{") else f"privacy: {{{privacy}}}")
    text = "\n".join(lines) + "\ncolumns:\n"
    text += columns if isinstance(columns, str) else "".join(f"  {name}: {body}\n" for name, body in columns.items())
    text += "statistics:\n"
    text += statistics if isinstance(statistics, str) else "".join(f"  - {line}\n" for line in statistics)
    return text + extra

