"""``dpcli synth``: a synthetic CSV from noisy marginals (MST, McKenna, Sheldon & Miklau 2021), as a paid run.

    synth spec -> synth plan (no data: domain, ρ per step, σ², the selection's rate) -> paths, ledger, release id
        (exit 2/3/4, nothing spent) -> exact marginals (the engine: every one-way and every candidate pair, one read)
        -> CHARGE (one Budget: one-ways + selections + measurements) -> NOISY STATE (Work.draw: noisy one-ways, the
           tree's d − 1 exponential-mechanism selections, the selected pairs' noisy counts, a 32-byte seed; stored)
        -> POST-PROCESSING (Work.publish/republish, from the stored state only: the tree model's estimate, rows
           sampled from it, values placed in their bins; the CSV, the noisy marginals, the sidecar, the report)

The stored state is small integers and a seed, never the synthetic file: a run that failed during estimation or
writing (memory, a signal, a full disk) is exit 5 naming the paid record, and a re-run under its release id
estimates again from the stored measurements, spending nothing and drawing no noise, and writes the same bytes.
What the draw does with the exact data is the only private part; everything after it reads released values only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, Any

import numpy as np

from dpcli.core.accounting import format_exact
from dpcli.core.files import atomic_write
from dpcli.core.samplers import RandomSource, default_source, discrete_gaussian
from dpcli.core.version import __version__
from dpcli.engine.inputs import (
    DEFAULT_INPUT_TIMEOUT,
    DEFAULT_MAX_INPUT_BYTES,
    InputFile,
    check_input_timeout,
    input_path,
)
from dpcli.errors import InternalError, OutputError, UsageError
from dpcli.ledger import (
    DEFAULT_LOCK_TIMEOUT,
    BudgetStatus,
    Delivery,
    Ledger,
    Purchase,
    Record,
    open_ledger,
    resolve_ledger,
)
from dpcli.mechanisms.mst import pair_scores, select_tree
from dpcli.plan.synth import SynthPlan, make_synth_plan
from dpcli.postprocess.synth_model import (
    compress_counts,
    compress_domain,
    compressed_size,
    expand_codes,
    fit_tree,
    iter_codes,
    noisy_total,
)
from dpcli.publish.paths import Protected, check_release_paths, check_targets, named_path
from dpcli.publish.paths import output_path as checked_output
from dpcli.publish.sidecar import release_time
from dpcli.publish.synth_output import Measured, SyntheticWriter, code_labels, marginals_csv, values_key
from dpcli.run.paid import Paid, PaidRun, Unpaid, leaves_nothing, run_release_id, what_failed
from dpcli.specs.load import load_spec
from dpcli.specs.meaning import release_meaning
from dpcli.specs.model import Spec, Synth
from dpcli.specs.v1 import ENGINES, INPUT_FORMATS, MAX_SYNTH_ROWS

__all__ = ["STATE_FORMAT", "SYNTH_COMMAND", "Synthesized", "draw_state", "selection_scores", "synth"]

SYNTH_COMMAND = "synth"  # the spend record's ``command``
STATE_FORMAT = "dpcli.synth-state/1"

Noise = Callable[[Fraction, int], np.ndarray]  # σ², size -> integer noise (the tests' no-noise path gives zeros)


@dataclass(frozen=True)
class State:
    """The stored noisy state of a synth release: released values only (noisy integer marginals, the selected pairs,
    the post-processing seed)."""

    one_way: tuple[np.ndarray, ...]
    selected: tuple[tuple[int, int], ...]
    pairs: tuple[np.ndarray, ...]  # the selected pairs' noisy counts over the compressed codes, in selection order
    seed: bytes
    maps: tuple[np.ndarray, ...]  # per column: each code's compressed code (from the noisy one-ways: public)

    @property
    def compressed_sizes(self) -> tuple[int, ...]:
        return tuple(compressed_size(m) for m in self.maps)

    @property
    def compressed_one_way(self) -> list[np.ndarray]:
        """The noisy one-ways summed onto the compressed codes."""
        return [compress_counts(c, [m]) for c, m in zip(self.one_way, self.maps, strict=True)]

    def encode(self) -> bytes:
        return json.dumps({
            "format": STATE_FORMAT,
            "one_way": [a.tolist() for a in self.one_way],
            "selected": [list(p) for p in self.selected],
            "pairs": [a.tolist() for a in self.pairs],
            "seed": self.seed.hex(),
            "maps": [m.tolist() for m in self.maps],
        }, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> State:
        doc = json.loads(data)
        if doc.get("format") != STATE_FORMAT:
            raise InternalError("the stored synth state is not in a format this dpcli reads")
        return cls(
            tuple(np.asarray(a, dtype=np.int64) for a in doc["one_way"]),
            tuple((int(a), int(b)) for a, b in doc["selected"]),
            tuple(np.asarray(a, dtype=np.int64) for a in doc["pairs"]),
            bytes.fromhex(doc["seed"]),
            tuple(np.asarray(m, dtype=np.int64) for m in doc["maps"]),
        )


def _gaussian(sigma2: Fraction, size: int) -> np.ndarray:
    return discrete_gaussian(sigma2, size)


def draw_state(plan: SynthPlan, exact: Sequence[Any], noise: Noise = _gaussian,
               source: RandomSource | None = None) -> State:
    """The noisy state from the exact marginals (``exact``: the engine's ExactStatistic list over ``plan.exact_plan``:
    the d one-ways, then every candidate pair in ``plan.candidates`` order). The only code that reads exact data:
    noisy one-ways; the tree's d − 1 selections by the exact exponential mechanism, on integer scores made from the
    exact pairs and the NOISY one-ways; the selected pairs' noisy counts. ``noise`` is the discrete Gaussian (the
    tests' internal no-noise path passes zeros; the CLI cannot)."""
    src = source if source is not None else default_source()
    d = len(plan.sizes)
    if len(exact) != d + len(plan.candidates):
        raise InternalError("the engine returned another number of marginals than the synth plan asked for")
    counts = [np.asarray(e.counts, dtype=np.int64) for e in exact]
    one_way = tuple(c + noise(plan.one_way_sigma2, len(c)) for c in counts[:d])
    exact_pairs, scores, maps = selection_scores(
        plan, {pair: counts[d + k] for k, pair in enumerate(plan.candidates)}, one_way)
    selected = select_tree(d, plan.candidates, scores, *plan.rate, source=src)
    pairs = tuple(exact_pairs[p] + noise(plan.pair_sigma2, len(exact_pairs[p])) for p in selected)
    return State(one_way, tuple(selected), pairs, src.random_bytes(32), maps)


def selection_scores(
    plan: SynthPlan, exact_pairs: Mapping[tuple[int, int], np.ndarray], one_way: Sequence[np.ndarray]
) -> tuple[dict[tuple[int, int], np.ndarray], np.ndarray, tuple[np.ndarray, ...]]:
    """The selection's scores as a run makes them: MST's domain compression from the noisy one-ways alone
    (post-processing: the codes below 3σ share one code), every candidate pair's exact counts summed onto the
    compressed codes (a row is still in one cell: the same sensitivity, fewer cells), and each pair's integer score
    against the independence model of the compressed noisy one-ways, scaled to their noisy total (never the true n).
    Returns the compressed exact pairs, the scores (candidates' order) and the code maps.
    tests/test_sensitivity_synth.py checks the scores' sensitivity through this function."""
    maps = tuple(compress_domain(c, plan.one_way_sigma2) for c in one_way)
    one_way_c = [compress_counts(c, [m]) for c, m in zip(one_way, maps, strict=True)]
    compressed = {(a, b): compress_counts(exact_pairs[(a, b)], [maps[a], maps[b]]) for a, b in plan.candidates}
    scores = pair_scores(compressed, one_way_c, noisy_total(list(one_way), plan.one_way_sigma2))
    return compressed, scores, maps


@dataclass
class Synthesized:
    """What a finished synth run did (the synthetic file's row count is public: declared, or from the noisy total)."""

    plan: SynthPlan
    spend: Record
    status: BudgetStatus | None
    output: Path | None  # None: standard output
    marginals: Path | None
    sidecar: Path | None
    report: Path | None
    ledger: str
    release_id: str
    rows: int
    selected: tuple[tuple[str, str], ...]
    reused: bool = False

    @property
    def rho_spent(self) -> Fraction:
        return Fraction(0) if self.reused else self.plan.charge.rho

    @property
    def method(self) -> str:
        return _synth_section(self.plan.spec).method

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(sc.name for sc in _synth_section(self.plan.spec).columns)


def _synth_section(spec: Spec) -> Synth:
    if spec.synth is None:
        raise InternalError("a synth run of a spec without synth:")
    return spec.synth


def synth(
    spec: Spec | str | Path,
    *,
    input: str | Path | None = None,  # noqa: A002 - the contract's name
    output: str | Path | None = None,
    ledger: str | Path | Ledger | None = None,
    release_id: str | None = None,
    marginals: str | Path | None = None,
    sidecar: str | Path | None = None,
    report: str | Path | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    input_timeout: float | None = DEFAULT_INPUT_TIMEOUT,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    input_format: str | None = None,
    engine: str | None = None,
    spark_master: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Synthesized:
    """Write a synthetic CSV of the spec's ``synth:`` columns (MST), charging the ledger like a release: the same
    release id, dataset and spec write the stored release again and spend nothing, without reading the input.

    ``output`` (``-``: standard output; default the spec's ``output:``), ``marginals`` (the noisy marginals table;
    default OUTPUT.marginals.csv beside an output file), ``sidecar`` (default OUTPUT.meta.json beside it) and
    ``report`` (an HTML page, only when asked) are all checked before anything is read or spent. The other arguments
    mean what they mean for ``dpcli.release``."""
    from dpcli.engine import aggregate, check_input
    from dpcli.engine import input_format as format_of

    say = progress or (lambda _msg: None)
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    if spec.synth is None:
        raise UsageError("dpcli synth needs a spec with a synth: section", hint="see docs/how-to-synth.md")
    plan = make_synth_plan(spec)
    say(f"spec valid and planned: {len(plan.sizes)} column(s), {len(plan.candidates)} candidate pair(s)")
    release_id, named = run_release_id(release_id)
    input_timeout = check_input_timeout(input_timeout)
    source = input_path(input, spec.input)
    fmt = format_of(source, _choice(input_format, INPUT_FORMATS, "--input-format"), spec.input_format)
    engine = _choice(engine, ENGINES, "--engine") or spec.engine
    if engine == "spark" and source is None:
        raise UsageError("the Spark engine reads files, not standard input", hint="pass --input PATH")
    output_path = checked_output(output if output is not None else spec.output)
    location: str | Path | None = None
    if isinstance(ledger, Ledger):
        book = ledger
    else:
        location = resolve_ledger(ledger, spec.ledger)
        book = open_ledger(location, lock_timeout=lock_timeout)
    spec_file = Path(spec.source) if spec.source != "<string>" else None
    check_release_paths(spec_file, source, output_path, book, location)
    marginals_path = _beside(marginals, output_path, ".marginals.csv", "marginals table")
    meta_path = _beside(sidecar, output_path, ".meta.json", "sidecar")
    report_path = None if report is None else named_path(os.fspath(report), "report")
    # none of them is what the run reads or keeps, the synthetic file, or one another (exit 2, nothing spent)
    keep = Protected().add(spec_file, "the spec").add(source, "the input file").add_ledger(book, location)
    keep.add(output_path, "the output")
    check_targets([(marginals_path, "marginals table"), (meta_path, "sidecar"), (report_path, "report")], keep)
    say("paths checked")

    records = book.records()
    say("ledger chain verified")
    run = PaidRun(
        book, spec.dataset, plan.charge,
        Purchase.of(spec.dataset, spec.sha256, release_id, spec.privacy.pinned_unit, spec.privacy.neighbours,
                    tuple(sc.name for sc in spec.synth.columns), SYNTH_COMMAND, meaning=release_meaning(spec),
                    name=spec.name, period=release_id if named else None),
        named, lock_timeout, say,
    )
    work = _SynthWork(plan, book, release_id, output_path, marginals_path, meta_path, report_path, say)
    if run.paid_earlier(records):
        say(f"release id '{release_id}' of this spec is paid for: estimating again from its stored measurements, "
            "reading no input")
        return run.reissue(work)
    run.check_budget(records)
    say("budget available")

    if engine == "spark":
        from dpcli.engine import spark_engine  # pyspark is an optional extra

        work.exact = spark_engine.aggregate(plan.exact_plan, str(source), master=spark_master, input_format=fmt,
                                            max_input_bytes=max_input_bytes)
        say("exact marginals computed by Spark")
    else:
        with InputFile(source, input_timeout, max_input_bytes) as src:
            check_input(spec, src.path, fmt)
            say("header has every declared column")
            work.exact = aggregate(plan.exact_plan, src.path, input_format=fmt, max_input_bytes=max_input_bytes)
            say("exact marginals computed")
    return run.pay(work)


def _choice(value: str | None, choices: tuple[str, ...], option: str) -> str | None:
    if value is not None and value not in choices:
        raise UsageError(f"{option} must be one of {', '.join(choices)}, not {value!r}")
    return value


def _beside(given: str | Path | None, output: Path | None, suffix: str, what: str) -> Path | None:
    """An output beside the synthetic file (OUTPUT.marginals.csv, OUTPUT.meta.json), unless given; none for
    standard output unless given."""
    if given is not None:
        return named_path(os.fspath(given), what)
    return None if output is None else output.with_name(output.name + suffix)


@dataclass
class _SynthWork:
    """A synth run's part of the paid run: the noisy state drawn once (stored), the synthetic file and everything
    beside it made from that state alone, on the first run and on every re-run under the release id."""

    plan: SynthPlan
    book: Ledger
    release_id: str
    output: Path | None
    marginals: Path | None
    sidecar: Path | None
    report: Path | None
    say: Callable[[str], None]
    exact: list[Any] | None = None
    state: State | None = None
    waiting_for: str = "its measurements"
    stored_note: str = "noisy marginals stored"

    def draw(self) -> bytes:
        exact, self.exact = self.exact, None
        if exact is None:
            raise InternalError("a synth release's measurements are drawn once, from the exact marginals")
        self.state = draw_state(self.plan, exact)
        del exact
        self.say("marginals selected and measured")
        return self.state.encode()

    def delivery(self, release_id: str, stored_sha256: str) -> Delivery:
        return Delivery(release_id, stored_sha256)

    def publish(self, spend: Record, paid: Paid) -> Synthesized:
        if self.state is None:
            raise InternalError("a synth release is published after its measurements are drawn")
        return self._write(self.state, spend, paid, reused=False)

    def republish(self, spend: Record, stored: bytes) -> Synthesized:
        return self._write(State.decode(stored), spend, Unpaid.reissue(spend), reused=True)

    def unstored(self, released: bool) -> str:
        return ("its stored measurements are missing from the release store" if released
                else "its measurements were never stored")

    def drop(self) -> None:
        self.exact = None

    def _write(self, state: State, spend: Record, paid: Paid | Unpaid, reused: bool) -> Synthesized:
        plan = self.plan
        spec = plan.spec
        measured = _measured(plan, state)
        # the model is fitted over the compressed codes (the pairs were measured there), then each row's merged code
        # is expanded to one of its codes by their noisy one-way counts
        model_pairs = dict(zip(state.selected, state.pairs, strict=True))
        sizes = state.compressed_sizes
        one_way_c = state.compressed_one_way
        model = fit_tree(sizes, one_way_c, plan.one_way_sigma2, model_pairs, plan.pair_sigma2)
        rows = plan.synth.rows
        if rows is None:  # `rows: noisy`: the measurements' weighted total (post-processing), never the true n,
            # at most what a spec may declare (at a tiny ρ the noise alone could ask for a file of any size)
            rows = min(noisy_total(one_way_c, plan.one_way_sigma2, model_pairs, plan.pair_sigma2), MAX_SYNTH_ROWS)
        self.say("model estimated")
        table = marginals_csv(spec, measured)
        meta = synth_metadata(plan, spend, state, rows)
        writer = SyntheticWriter(spec, values_key(state.seed))
        # the synthetic file's own marginals over the measured ones (the report's fit: public against public)
        fitted = [np.zeros(len(m.counts), dtype=np.int64) for m in measured]

        def write_rows(fh: IO[bytes]) -> None:
            """The rows a block at a time (memory: one block's, whatever the row count)."""
            fh.write(writer.header())
            expanders = [np.random.PCG64(int.from_bytes(hashlib.sha256(b"dpcli synth expand\0" + state.seed
                                                                      + i.to_bytes(4, "big")).digest(), "big"))
                         for i in range(len(sizes))]
            for compressed in iter_codes(model, rows, state.seed):
                block = np.stack([expand_codes(compressed[:, i], state.maps[i], state.one_way[i], expanders[i])
                                  for i in range(len(sizes))], axis=1) if len(compressed) else compressed
                fh.write(writer.block(block))
                if self.report is not None:
                    for f, m in zip(fitted, measured, strict=True):
                        f += (synthetic_counts(block, plan.sizes, m.columns) if len(m.columns) == 1
                              else synthetic_counts(compressed, sizes, m.columns))

        targets = [p for p in (self.output, self.marginals, self.sidecar, self.report) if p is not None]
        try:
            with leaves_nothing(*targets):
                if self.output is None:
                    write_rows(sys.stdout.buffer)
                    sys.stdout.buffer.flush()
                else:
                    atomic_write(self.output, write_rows)
                if self.marginals is not None:
                    atomic_write(self.marginals, lambda fh: fh.write(table))
                if self.sidecar is not None:
                    text = (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
                    atomic_write(self.sidecar, lambda fh: fh.write(text))
                if self.report is not None:
                    from dpcli.publish.synth_report import render_synth_report

                    page = render_synth_report(spec, meta, measured, fitted).encode("utf-8")
                    atomic_write(self.report, lambda fh: fh.write(page))
        except OSError as exc:
            raise OutputError(f"could not write the synthetic data ({what_failed(exc)}); {paid.text()}",
                              hint=paid.hint()) from None
        self.say("output written")
        status = self.book.status(spec.dataset, period=spend.get("period"))
        names = tuple((plan.columns[a], plan.columns[b]) for a, b in state.selected)
        return Synthesized(plan, spend, status, self.output, self.marginals, self.sidecar, self.report,
                           self.book.name, self.release_id, rows, names, reused)


def _measured(plan: SynthPlan, state: State) -> list[Measured]:
    """The published marginals: the d one-ways, then the selected pairs (over the compressed codes) in selection
    order."""
    out = [Measured((i,), counts, plan.one_way_sigma2) for i, counts in enumerate(state.one_way)]
    out += [Measured(pair, counts, plan.pair_sigma2, (state.maps[pair[0]], state.maps[pair[1]]))
            for pair, counts in zip(state.selected, state.pairs, strict=True)]
    return out


def synthetic_counts(codes: np.ndarray, sizes: Sequence[int], columns: tuple[int, ...]) -> np.ndarray:
    """The synthetic rows' counts over the cells of one marginal (row-major, the first column slowest)."""
    shape = tuple(sizes[i] for i in columns)
    flat = np.ravel_multi_index(tuple(codes[:, i] for i in columns), shape) if len(codes) else np.zeros(0, np.int64)
    return np.bincount(flat, minlength=int(np.prod(shape))).astype(np.int64)


def synth_metadata(plan: SynthPlan, spend: Record, state: State, rows: int) -> dict[str, Any]:
    """The sidecar: every public parameter of the synth release, none computed from the input (no row count, no
    hash of it). The noisy marginals themselves are in the marginals table."""
    spec = plan.spec
    synth = spec.synth
    if synth is None:
        raise InternalError("synth metadata of a spec without synth:")
    domain = []
    for sc in synth.columns:
        column = spec.columns[sc.name]
        entry: dict[str, Any] = {"column": sc.name, "type": column.type, "codes": code_labels(column, sc),
                                 "missing": sc.missing}
        if column.numeric and column.bounds is not None:
            lo, hi = column.bounds
            entry.update(values=sc.values, bounds=[format_exact(lo), format_exact(hi)],
                         precision=format_exact(column.grid_step))
        domain.append(entry)
    names = [sc.name for sc in synth.columns]
    return {
        "contract": "dpcli.synth/1",
        # a re-run writes the same bytes with the same dpcli, numpy and polars (the estimate's floats and the CSV
        # writer are theirs): the versions that made this file
        "dpcli_version": __version__,
        "made_with": {"numpy": np.__version__, "polars": _polars_version()},
        "release_id": spend.get("release_id"),
        "release_time": release_time(spend),
        "dataset": spec.dataset,
        "spec_sha256": spec.sha256,
        "method": synth.method,
        "unit": spec.privacy.unit,
        "neighbours": spec.privacy.neighbours,
        "accounting": "zcdp",
        "rho": format_exact(plan.charge.rho),
        "rows": {"published": rows, "from": "declared" if plan.synth.rows is not None else "noisy total"},
        "domain": domain,
        "steps": [
            {"step": "one_way", "rho": format_exact(plan.rho_one_way), "noise": "discrete Gaussian",
             "sigma2": format_exact(plan.one_way_sigma2), "marginals": [[n] for n in names]},
            {"step": "select", "rho": format_exact(plan.rho_select), "mechanism": "exponential (exact)",
             "rounds": len(names) - 1, "epsilon_per_round": format_exact(plan.epsilon_select),
             "score_sensitivity": plan.score_sensitivity, "accounting": "bounded range: epsilon^2/8 per round",
             "selected": [[names[a], names[b]] for a, b in state.selected]},
            {"step": "measure", "rho": format_exact(plan.rho_measure), "noise": "discrete Gaussian",
             "sigma2": format_exact(plan.pair_sigma2),
             "marginals": [[names[a], names[b]] for a, b in state.selected],
             # MST's domain compression (from the noisy one-ways): per column, the codes merged into one for the
             # pairs (empty: none)
             "compressed": {sc.name: [label for label, code in zip(code_labels(spec.columns[sc.name], sc),
                                                                   state.maps[i].tolist(), strict=True)
                                      if code == int(state.maps[i].max()) and len(state.maps[i]) > int(
                                          state.maps[i].max()) + 1]
                            for i, sc in enumerate(synth.columns)}},
        ],
        "ledger": {"record": spend.seq, "head": spend.hash},
    }


def _polars_version() -> str:
    import polars as pl

    return str(pl.__version__)
