"""The process's own limits: the allocators set to live within an address-space limit, that limit checked against a
release's memory estimate before anything is read, and a process limit that ran out said as what it is.

Under ``ulimit -v`` (RLIMIT_AS) a failed allocation inside polars cannot be caught: Rust aborts the process (SIGABRT,
no message). So what can be known beforehand is checked beforehand (``check_address_space``), and the allocators are
set so that the address space a release maps stays near what it uses (``set_allocators``).
"""

from __future__ import annotations

import errno
import os
import sys

from dpcli.errors import ResourceError, SpentThenFailed

M_ARENA_MAX = -8  # glibc's <malloc.h>: the most malloc arenas the process may make

# Address space a release maps beyond its memory estimate (dpcli/plan/cost.py, release_cost), with set_allocators() in
# effect: the interpreter and the libraries' mappings, the threads' stacks, the allocators' reservations and the scan
# of the input (chunks of 16 MB, two at a time), of which each polars thread parses its share. VmPeak of whole `dpcli
# release` runs (bench/bench_address_space.py, 2 CPUs): a 14-cell release (estimate 201 MB) maps 415 MB over 1,000
# rows and 530 over 2M rows with 2 polars threads, 730 with 8; a 5M-cell histogram (estimate 429 MB) 554 with 2, 732
# with 8. The smallest limits they ran under with 2 threads: 410, 537 and 565 MB.
ADDRESS_SPACE_BASE_MB = 300
ADDRESS_SPACE_PER_THREAD_MB = 32


def set_allocators() -> None:
    """Cap glibc's malloc arenas at one and turn off the background threads of polars' allocator (jemalloc), before
    any thread starts or polars is loaded: the entry point's second act, after the signal handlers.

    glibc gives each thread that calls malloc an arena of its own (up to 8 per core), each reserving 64 MB of address
    space: the threads of polars and its runtime made a 200k-row release map 1.5 GB for 180 MB resident, so
    ``ulimit -v 1000000`` ended it in the allocator; with one arena it maps 490 MB. Python and numpy allocate from
    the main thread and polars from jemalloc, so one arena costs no measurable time. jemalloc's background threads
    (4) print a line each time one cannot start (hundreds of thousands of lines under a tight limit); they only
    return freed pages sooner. A ``_RJEM_MALLOC_CONF`` (or ``OPENBLAS_NUM_THREADS``) of the caller's own is kept."""
    os.environ.setdefault("_RJEM_MALLOC_CONF", "background_thread:false")
    import resource

    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        # numpy's OpenBLAS reserves a buffer per thread as it loads, and when one fails it prints its own line and
        # ends the process: under an address-space limit, one thread (dpcli's algebra is small)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.platform != "linux":
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a C library without mallopt: nothing to cap
        return
    mallopt(M_ARENA_MAX, 1)


def address_space_needed_mb(memory_mb: int) -> int:
    """The address space (MiB) a release of estimated peak memory ``memory_mb`` needs: public, from the spec and the
    number of polars threads (``POLARS_MAX_THREADS``, else the CPUs this process may run on)."""
    threads_text = os.environ.get("POLARS_MAX_THREADS", "")
    threads = int(threads_text) if threads_text.isdigit() and int(threads_text) > 0 else _cpus()
    return memory_mb + ADDRESS_SPACE_BASE_MB + ADDRESS_SPACE_PER_THREAD_MB * threads


def check_address_space(memory_mb: int) -> None:
    """ResourceError (exit 1) when the address-space limit (``ulimit -v``, the soft RLIMIT_AS) is below what a
    release of estimated peak memory ``memory_mb`` needs: called before anything is read or spent, instead of an
    abort in the allocator (no message) part-way through the scan or after the spend."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return
    needed = address_space_needed_mb(memory_mb)
    if soft < needed * 2**20:
        raise ResourceError(
            f"the address-space limit (ulimit -v) is {soft // 2**20} MB, below the {needed} MB this release needs "
            f"(its estimated peak memory, {memory_mb} MB, plus {needed - memory_mb} MB for the libraries, threads "
            "and the input's scan); nothing was read or spent",
            hint="raise `ulimit -v`, run fewer polars threads (POLARS_MAX_THREADS), or split the release",
        )


# File descriptors a release opens at most at once beyond those open when it starts: the ledger, its head and lock,
# the input (or its spool), the output's temporary file, polars' threads. A release of a 200k-row file needed 4 beyond
# the 5 open when this is checked (stdin, stdout, stderr and two of polars'); with 3, it failed.
SPARE_FILES = 8


def check_open_files() -> None:
    """ResourceError (exit 1) when the open-file limit (``ulimit -n``, the soft RLIMIT_NOFILE) leaves fewer than
    SPARE_FILES descriptors beyond those open now: called before anything is read or spent, instead of a panic in
    polars' threads or an error that would blame the input or the ledger."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        open_now = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own descriptor
    except OSError:  # no /proc (or no descriptor left to list it): stdin, stdout and stderr
        open_now = 3
    if soft != resource.RLIM_INFINITY and soft < open_now + SPARE_FILES:
        raise ResourceError(
            f"too many open files: the open-file limit (ulimit -n) is {soft}, below the {open_now + SPARE_FILES} "
            f"this release needs ({open_now} open now, plus {SPARE_FILES}); nothing was read or spent",
            hint="raise `ulimit -n`",
        )


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# the errno values of a process limit, and what to say about each
_LIMITS = {
    errno.EMFILE: "too many open files (raise `ulimit -n`)",
    errno.ENFILE: "too many open files in the system",
    errno.ENOMEM: "out of memory (or over the address-space limit, `ulimit -v`)",
}


def process_limit(exc: BaseException) -> ResourceError | None:
    """``exc`` (raised before the spend) as a ResourceError when what it comes from is a process limit: a
    MemoryError, or an OSError of EMFILE, ENFILE or ENOMEM anywhere in its chain of causes (an error about the input
    or the ledger raised while opening a file, say). None otherwise, and always for a failure after the spend, which
    must name its record (exit 5)."""
    if isinstance(exc, (SpentThenFailed, ResourceError)):
        return None
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, MemoryError):
            return ResourceError(f"{_LIMITS[errno.ENOMEM]}; nothing was spent")
        if isinstance(cause, OSError) and cause.errno in _LIMITS:
            return ResourceError(f"{_LIMITS[cause.errno]}; nothing was spent")
        if isinstance(cause, ImportError) and any(
            words in str(cause) for words in ("failed to map segment", "Cannot allocate memory")
        ):  # the dynamic loader could not map a library (numpy's, polars') under `ulimit -v`
            return ResourceError(f"{_LIMITS[errno.ENOMEM]}; nothing was spent")
        cause = cause.__cause__ or cause.__context__
    return None
