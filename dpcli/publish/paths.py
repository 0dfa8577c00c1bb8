"""Where a command reads and writes, checked before anything is spent.

A release's output is written by renaming a new file over its name (dpcli.core.files.atomic_write), so whatever the name
points at is replaced. Everything that would be replaced by mistake, or could not be written at all, is refused
here with exit 2 before the spend: an empty name, a name ending in a slash, a directory, a device, a FIFO, a
socket, a symbolic link, the spec, the input, and every file the ledger keeps (its head, the head being staged,
the release store). The sidecar (``OUTPUT.meta.json``) is checked the same way. Only a missing name or a regular
file may be an output; ``-`` is standard output (``/dev/stdout`` and its other names are refused, pointing to it).

Every file dpcli writes goes through ``check_target``: a release's table, its sidecar, its report and Markdown
summary (``--report``, ``--meta``, ``--summary-md``), ``dpcli report``'s page and summary, and ``dpcli init``'s
spec. ``Protected`` lists what a command reads or keeps (never one of its outputs), and the outputs of one run are
distinct from each other. A file that is appended to (``--summary-md``, e.g. ``$GITHUB_STEP_SUMMARY``) is opened by
``open_append`` without blocking and without following a symbolic link, so a FIFO put in its place cannot hang a
run that has spent.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from dpcli.core.locations import is_ledger_url
from dpcli.errors import InputError, UsageError
from dpcli.ledger import Ledger

__all__ = [
    "Protected", "append", "check_init_target", "check_output_target", "check_release_paths", "check_target",
    "check_targets", "is_stdout_name", "named_path", "open_append", "output_path",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass
class Protected:
    """The files a command reads or keeps, by what they are (for the message): none of them may be an output."""

    files: list[tuple[Path, str]] = field(default_factory=list)
    trees: list[Path] = field(default_factory=list)  # directories no output may be inside (the release store)

    def add(self, path: Path | None, name: str) -> Protected:
        if path is not None:
            self.files.append((path, name))
        return self

    def add_ledger(self, book: Ledger | None, location: str | Path | None) -> Protected:
        """The ledger's file (a path, not a server's URL) and every file it keeps: its head, the head being staged,
        the release store."""
        self.add(ledger_file(location), "the ledger")
        if book is not None:
            self.files += [(p, "a file of the ledger") for p in book.own_paths]
            self.trees += list(book.own_trees)
        return self


def ledger_file(location: str | Path | None) -> Path | None:
    return None if location is None or is_ledger_url(location) else Path(location)


def check_release_paths(
    spec_file: Path | None, input_path: Path | None, output: Path | None, book: Ledger | None,
    location: str | Path | None,
) -> None:
    """Everything about where a release reads and writes that can be refused before the spend (exit 2): the ledger
    is not the input; the output (and its sidecar) is none of the spec, the input, the ledger's files (``book``
    None: no ledger is checked, as by `dpcli check` without --ledger)."""
    ledger_path = ledger_file(location)
    if input_path is not None and ledger_path is not None and _same(input_path, _stat(input_path), ledger_path):
        raise UsageError(f"the ledger {ledger_path} is the input file")
    if output is None:
        return
    check_output_target(
        output,
        spec=spec_file,
        input=input_path,
        ledger=ledger_path,
        protected=() if book is None else book.own_paths,
        protected_trees=() if book is None else book.own_trees,
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
    return named_path(raw, "output")


def named_path(raw: str, what: str) -> Path:
    """A file name given for ``what``, refused when empty or when it names a directory (a trailing slash, ``.``)."""
    if raw == "":
        raise UsageError(f"the {what} is an empty name: give a file path, or - for standard output"
                         if what == "output" else f"the {what} is an empty name: give a file path")
    if raw.endswith(("/", os.sep, "/.", "/..")) or raw in (".", ".."):
        raise UsageError(f"{what} {raw} names a directory: give a file path inside it")
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
    from dpcli.publish.sidecar import sidecar_path  # its table module (numpy) only where an output is checked

    keep = Protected().add(spec, "the spec").add(input, "the input file").add(ledger, "the ledger")
    keep.files += [(p, "a file of the ledger") for p in protected]
    keep.trees += list(protected_trees)
    _check_one(output, "output", keep)
    _check_one(sidecar_path(output), "the output's sidecar", keep)
    _check_directory(output, "output")


def check_target(target: Path, what: str, keep: Protected) -> None:
    """The one check of a file dpcli is about to write (replace, or append to): a new name or a regular file, none
    of ``keep`` (by name or by identity: hard links, symbolic links, symlinked directories), not inside a protected
    tree (exit 2); its directory exists and is writable (exit 3)."""
    _check_one(target, what, keep)
    _check_directory(target, what)


def _check_directory(target: Path, what: str) -> None:
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{what} {target}: its directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):  # EROFS on a read-only mount too
        raise InputError(f"{what} {target}: its directory {directory} is not writable")


def check_targets(targets: Iterable[tuple[Path | None, str]], keep: Protected) -> None:
    """``check_target`` for each of one run's outputs (None: not asked for), which must also be distinct files."""
    seen = Protected(trees=list(keep.trees), files=list(keep.files))
    for target, what in targets:
        if target is None:
            continue
        check_target(target, what, seen)
        seen.add(target, what)


def check_init_target(target: Path, csv: Path) -> None:
    """``dpcli init -o``: the skeleton is never the CSV it reads, nor the ledger $DPCLI_LEDGER names (or a file that
    ledger keeps), and goes through ``check_target`` like every output."""
    keep = Protected().add(csv, "the CSV it reads")
    location = os.environ.get("DPCLI_LEDGER") or None
    if location is not None and not is_ledger_url(location):
        from dpcli.errors import DpcliError
        from dpcli.ledger import open_ledger

        try:
            book: Ledger | None = open_ledger(location)
        except DpcliError:  # a ledger that cannot be opened is still a name the skeleton must not take
            book = None
        keep.add_ledger(book, location)
    check_target(target, "output", keep)


def open_append(target: Path, what: str) -> BinaryIO | None:
    """An existing ``target`` opened for appending, checked to be a regular file (None when there is no file yet:
    ``append`` creates it). Non-blocking and not through a symbolic link: a FIFO or a link put in its place after
    ``check_target`` is refused, not waited on (exit 2)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _open_error(target, what, exc) from None
    return _regular(fd, target, what)


def append(target: Path, what: str, handle: BinaryIO | None, data: bytes) -> None:
    """Append ``data`` to ``target`` through ``handle`` (opened before the spend by ``open_append``), or to a new
    file (created now, not through a link, never blocking)."""
    if handle is None:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC,
                         0o666)
        except OSError as exc:
            raise _open_error(target, what, exc) from None
        handle = _regular(fd, target, what)
    with handle:
        handle.write(data)
        handle.flush()


def holds_line(target: Path, handle: BinaryIO | None, line: str) -> bool:
    """Whether the file at ``target`` (the one ``handle`` has open, when given) holds ``line`` as a whole line: read
    as a regular file, not through a link, never blocking. A file that cannot be read (no such file, no read
    permission, another file put in its place) holds nothing."""
    want = line.encode("utf-8")
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        if handle is not None:
            opened = os.fstat(handle.fileno())
            if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
                return False
        return any(found.rstrip(b"\r\n") == want for found in fh)


def _regular(fd: int, target: Path, what: str) -> BinaryIO:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"{what} {target} is not a regular file (a device, FIFO or socket)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


def _open_error(target: Path, what: str, exc: OSError) -> UsageError | InputError:
    if exc.errno == errno.ELOOP:
        return UsageError(f"{what} {target} is a symbolic link: refusing to write through it")
    if exc.errno == errno.ENXIO:  # O_NONBLOCK on a FIFO that nobody reads
        return UsageError(f"{what} {target} is not a regular file (a device, FIFO or socket)")
    return InputError(f"cannot write {what} {target}: {exc.strerror or type(exc).__name__}")


def is_stdout_name(target: Path) -> bool:
    """``target`` names this process's standard output by a device name (``/dev/stdout``, ``/dev/fd/1``,
    ``/proc/self/fd/1``, ...): a file cannot be renamed over it, and ``-`` says the same."""
    return os.path.abspath(target) in (
        "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", "/proc/thread-self/fd/1", f"/proc/{os.getpid()}/fd/1",
    )


def _check_one(target: Path, what: str, keep: Protected) -> None:
    if is_stdout_name(target):
        raise UsageError(
            f"{what} {target} is standard output by a device name: dpcli writes a new file and renames it over "
            "the name, which it cannot do there",
            hint="use -o - for standard output" if what == "output" else None,
        )
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
    for other, name in keep.files:
        if _same(target, st, other):
            raise UsageError(f"{what} {target} is {name}: refusing to overwrite it")
    real = _real(target)
    for tree in keep.trees:
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
