"""Where a release reads and writes, checked before anything is spent.

A release's output is written by renaming a new file over its name (dpcli.files.atomic_write), so whatever the name
points at is replaced. Everything that would be replaced by mistake, or could not be written at all, is refused
here with exit 2 before the spend: an empty name, a name ending in a slash, a directory, a device, a FIFO, a
socket, a symbolic link, the spec, the input, and every file the ledger keeps (its head, the head being staged,
the release store). The sidecar (``OUTPUT.meta.json``) is checked the same way. Only a missing name or a regular
file may be an output; ``-`` is standard output.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from dpcli.errors import InputError, UsageError
from dpcli.ledger import Ledger
from dpcli.locations import is_ledger_url
from dpcli.output import sidecar_path

__all__ = ["check_output_target", "check_release_paths", "output_path"]


def check_release_paths(
    spec_file: Path | None, input_path: Path | None, output: Path | None, book: Ledger, location: str | Path | None
) -> None:
    """Everything about where a release reads and writes that can be refused before the spend (exit 2): the ledger
    is not the input; the output (and its sidecar) is none of the spec, the input, the ledger's files."""
    ledger_path = None if location is None or is_ledger_url(location) else Path(location)
    if input_path is not None and ledger_path is not None and _same(input_path, _stat(input_path), ledger_path):
        raise UsageError(f"the ledger {ledger_path} is the input file")
    if output is None:
        return
    check_output_target(
        output,
        spec=spec_file,
        input=input_path,
        ledger=ledger_path,
        protected=book.own_paths,
        protected_trees=book.own_trees,
    )


def output_path(text: str | Path | None) -> Path | None:
    """The output as given (``--output`` or the spec's ``output:``): None for standard output (``-`` or nothing).

    Checked as text first: ``Path("")`` is ``.`` and ``Path("out/")`` is ``out``, so an empty name would become
    the current directory and ``newdir/`` a file called ``newdir``.
    """
    if text is None:
        return None
    raw = os.fspath(text)
    if raw == "-":
        return None
    if raw == "":
        raise UsageError("the output is an empty name: give a file path, or - for standard output")
    if raw.endswith(("/", os.sep, "/.", "/..")) or raw in (".", ".."):
        raise UsageError(f"output {raw} names a directory: give a file path inside it")
    return Path(raw)


def check_output_target(
    output: Path,
    *,
    spec: Path | None = None,
    input: Path | None = None,  # noqa: A002 - the contract's name
    ledger: Path | None = None,
    protected: Iterable[Path] = (),
    protected_trees: Iterable[Path] = (),
) -> None:
    """Refuse an output (or its sidecar) that is not a new name or a regular file, or that is one of the files the
    release reads or the ledger keeps (exit 2); its directory must exist and be writable (exit 3, as before)."""
    keep: list[tuple[Path, str]] = []
    if spec is not None:
        keep.append((spec, "the spec"))
    if input is not None:
        keep.append((input, "the input file"))
    if ledger is not None:
        keep.append((ledger, "the ledger"))
    keep += [(p, "a file of the ledger") for p in protected]
    trees = list(protected_trees)
    for target, what in ((output, "output"), (sidecar_path(output), "the output's sidecar")):
        _check_one(target, what, keep, trees)
    directory = output.parent if str(output.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"output directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"output directory {directory} is not writable")


def _check_one(target: Path, what: str, keep: list[tuple[Path, str]], trees: list[Path]) -> None:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{what} {target}: {exc.strerror or 'cannot be examined'}") from None
    if st is not None:
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            raise UsageError(f"{what} {target} is a symbolic link: refusing to write through it")
        if stat.S_ISDIR(mode):
            raise UsageError(f"{what} {target} is a directory: give a file path inside it")
        if not stat.S_ISREG(mode):
            raise UsageError(
                f"{what} {target} is not a regular file (a device, FIFO or socket): dpcli writes a new file and "
                "renames it over the name, which would replace it",
                hint="use --output - and redirect instead",
            )
    for other, name in keep:
        if _same(target, st, other):
            raise UsageError(f"{what} {target} is {name}: refusing to overwrite it")
    real = _real(target)
    for tree in trees:
        top = _real(tree)
        if real == top or top in real.parents:
            raise UsageError(f"{what} {target} is inside the ledger's release store: refusing to write there")


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _same(target: Path, target_stat: os.stat_result | None, other: Path) -> bool:
    """One file under two names (hard links and symlinked directories included), or one name not yet created."""
    if target_stat is not None:
        try:
            o = os.stat(other)
        except OSError:
            pass
        else:
            if (o.st_dev, o.st_ino) == (target_stat.st_dev, target_stat.st_ino):
                return True
    return _real(target) == _real(other)


def _real(path: Path) -> Path:
    """The absolute path with the directory's symlinks resolved (the last component is kept as named)."""
    parent = path.parent if str(path.parent) else Path(".")
    return Path(os.path.realpath(parent)) / path.name
