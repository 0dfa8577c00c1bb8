#!/usr/bin/env python3
"""Synthetic data quality side by side (issue 27): the same discretised Adult file and public domain for every tool.

Data: tests/data/adult.csv (48,842 rows), discretised ONCE here into integer codes over a public domain of 13
columns: the categories as documented for UCI Adult (never read from the data; a missing cell is its own last code
where the column has missing cells), age, hours_per_week, capital_gain and capital_loss by fixed public bins. The
codes (CSV) and the domain (JSON) are written to --workdir (default: a temporary directory); nothing is committed.

Tools, each a whole process started from its own venv (under ~/.cache/dpcli-bench/venvs/NAME, made on first use
from the exact pins in VENVS), with a small runner in bench/peers/:
- floor: independent noisy one-way marginals (dpcli's exact discrete Gaussian, the whole ρ split over the columns),
  each column sampled on its own: the figure to beat;
- smartnoise-mst: SmartNoise Synth 1.0.8's MST (takes (ε, δ): given those, it converts them itself);
- opendp-mst, opendp-aim: OpenDP 0.16's `contingency_table` with `dp.mbi.MST()` / `dp.mbi.AIM()` (mbi 1.1.0);
- mbi-mst: Private-PGM's reference MST on mbi 2.0.0's estimation (the bench's port, bench/peers/mbi_mst.py);
- dpcli: `dpcli synth` on a generated spec (run_dpcli; skipped with a message while the command does not exist).

Budget: for each ε in --epsilons, δ = --delta (1e-9), ρ = (√(ε+L) − √L)², L = ln(1/δ) (dpcli's conversion) for
every tool that takes ρ; add/remove neighbours for all (no peer offers replace here, nor needs it). Rows: every
tool writes the true n rows (a public number for the peers' sake; dpcli's own spec declares it too).

Metric: the average total-variation distance ½·Σ|p − q| between the true and the synthetic normalised marginals,
over all 1-way, all 2-way and a fixed seeded sample of --triples 3-way marginals (a synthetic value outside the
domain, such as OpenDP's null cell, is its own cell, which the true data never fills); wall time and peak RSS
(os.wait4's ru_maxrss of the child) of each run, and its CPU seconds (user + system: they move less than wall
seconds on this shared machine). --repeat runs per (tool, ε); the table gives the means.

Usage::

    .venv/bin/python bench/bench_synth_quality.py                       # every tool, ε ∈ {0.3, 1, 3}, 3 runs
    .venv/bin/python bench/bench_synth_quality.py --tools floor,opendp-mst --epsilons 1 --repeat 1

Progress goes to stderr, the Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ADULT = REPO / "tests" / "data" / "adult.csv"
PEERS = HERE / "peers"
VENV_ROOT = Path.home() / ".cache" / "dpcli-bench" / "venvs"

# The exact pins of each peer's venv (what pip resolved on 2026-11-27, written down so a re-run installs the same).
# "first" is installed before the rest: torch from the machine's local CPU wheel, so opacus (SmartNoise Synth's
# dependency) never pulls a CUDA build.
VENVS: dict[str, dict[str, list[str]]] = {
    "smartnoise": {
        "first": ["torch==2.13.0"],
        "pins": ["smartnoise-synth==1.0.8", "mbi==1.1.0", "opendp==0.14.2", "opacus==0.14.0", "pac-synth==0.0.8",
                 "jax==0.10.2", "jaxlib==0.10.2", "numpy==2.4.6", "pandas==2.3.3", "scipy==1.17.1"],
    },
    "opendp": {
        "first": [],
        # pandas: ContingencyTable.synthesize() reads mbi's Dataset.df, which imports pandas; opendp[mbi] omits it
        "pins": ["opendp[mbi]==0.16.0", "mbi==1.1.0", "polars==1.36.1", "jax==0.10.2", "jaxlib==0.10.2",
                 "numpy==2.4.6", "scipy==1.17.1", "pandas==2.3.3"],
    },
    "mbi": {
        "first": [],
        "pins": ["mbi==2.0.0", "jax==0.10.2", "jaxlib==0.10.2", "numpy==2.4.6", "scipy==1.17.1"],
    },
}

# The public domain. Categories as documented for UCI Adult (adult.names), in that order; MISSING: a last code for
# an empty cell, on the columns the documentation says have unknowns ('?'). Bins: left-closed edges [a, b).
CATEGORIES: dict[str, list[str]] = {
    "workclass": ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked"],
    "education": ["Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc", "9th",
                  "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"],
    "marital_status": ["Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"],
    "occupation": ["Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
                   "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
                   "Priv-house-serv", "Protective-serv", "Armed-Forces"],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"],
    "race": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
    "sex": ["Female", "Male"],
    "native_country": ["United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                       "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran",
                       "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal",
                       "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia",
                       "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
                       "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"],
    "income": ["<=50K", ">50K"],
}
MISSING = {"workclass", "occupation", "native_country"}
BINS: dict[str, list[int]] = {
    "age": [17, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 91],   # bounds 17..90
    "hours_per_week": [1, 20, 30, 35, 40, 41, 45, 50, 60, 100],         # bounds 1..99; 40 h its own bin
    "capital_gain": [0, 1, 3000, 5000, 10000, 100000],                 # bounds 0..99999
    "capital_loss": [0, 1, 1500, 2000, 100000],                        # bounds 0..99999
}
COLUMNS = ["age", "workclass", "education", "marital_status", "occupation", "relationship", "race", "sex",
           "capital_gain", "capital_loss", "hours_per_week", "native_country", "income"]

TOOLS = ["floor", "smartnoise-mst", "opendp-mst", "opendp-aim", "mbi-mst", "dpcli"]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sizes() -> dict[str, int]:
    return {c: len(BINS[c]) - 1 if c in BINS else len(CATEGORIES[c]) + (c in MISSING) for c in COLUMNS}


def discretise(source: Path, workdir: Path) -> tuple[Path, Path, np.ndarray]:
    """The codes of every record over the public domain (a value outside it is an error: the bench's domain is
    wrong, not the data), written once as CSV with the domain beside it as JSON."""
    size = sizes()
    codes: list[list[int]] = []
    with source.open(newline="") as f:
        for record in csv.DictReader(f):
            row = []
            for column in COLUMNS:
                value = record[column]
                if column in BINS:
                    edges = BINS[column]
                    number = int(value)
                    if not edges[0] <= number < edges[-1]:
                        raise SystemExit(f"{column} = {number} is outside its bins {edges}")
                    row.append(int(np.searchsorted(edges, number, side="right")) - 1)
                elif value == "" and column in MISSING:
                    row.append(size[column] - 1)
                else:
                    row.append(CATEGORIES[column].index(value))
            codes.append(row)
    data = np.array(codes, dtype=np.int64)
    data_path = workdir / "adult_codes.csv"
    np.savetxt(data_path, data, fmt="%d", delimiter=",", header=",".join(COLUMNS), comments="")
    domain_path = workdir / "adult_domain.json"
    domain_path.write_text(json.dumps({
        "columns": COLUMNS, "sizes": size,
        "labels": {c: CATEGORIES[c] + (["(missing)"] if c in MISSING else []) for c in CATEGORIES},
        "bins": BINS,
    }, indent=1))
    return data_path, domain_path, data


def rho_of(epsilon: float, delta: float) -> float:
    """dpcli's conversion: the largest ρ whose zCDP guarantee implies (ε, δ) by ε = ρ + 2√(ρ·ln(1/δ))."""
    log_inv_delta = math.log(1 / delta)
    return (math.sqrt(epsilon + log_inv_delta) - math.sqrt(log_inv_delta)) ** 2


# ----------------------------------------------------------------------------------------------------- the metric


def marginal(data: np.ndarray, columns: tuple[int, ...], shape: list[int]) -> np.ndarray:
    """Normalised counts over the columns' codes; one extra cell per column for a code outside the domain."""
    cells = [s + 1 for s in shape]
    index = np.zeros(len(data), dtype=np.int64)
    for column in columns:
        code = data[:, column]
        code = np.where((code >= 0) & (code < shape[column]), code, shape[column])
        index = index * cells[column] + code
    counts = np.bincount(index, minlength=math.prod(cells[c] for c in columns)).astype(float)
    return counts / counts.sum()


def tv_distances(true: np.ndarray, synthetic: np.ndarray, shape: list[int], triples: list[tuple[int, ...]]
                 ) -> tuple[float, float, float]:
    d = len(shape)

    def mean_tv(sets: list[tuple[int, ...]]) -> float:
        return float(np.mean([0.5 * np.abs(marginal(true, s, shape) - marginal(synthetic, s, shape)).sum()
                              for s in sets]))

    return (mean_tv([(i,) for i in range(d)]), mean_tv(list(itertools.combinations(range(d), 2))), mean_tv(triples))


# ------------------------------------------------------------------------------------------------------ the runs


@dataclass
class Result:
    tool: str
    epsilon: float
    tv: list[tuple[float, float, float]] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    peak_mib: list[float] = field(default_factory=list)
    info: dict[str, str] = field(default_factory=dict)
    failed: str = ""


@dataclass(frozen=True)
class Job:
    data: Path
    domain: Path
    rho: float
    epsilon: float
    delta: float
    rows: int
    seed: int
    out: Path


TIMEOUT = [900.0]  # seconds a run may take before it is killed (--timeout)


def run_child(argv: list[str]) -> tuple[float, float, float, str]:
    """Run a whole process: (wall s, CPU s (user + system), peak RSS MiB of that child, its stdout); raise with its
    stderr on failure. CPU seconds move less than wall seconds on a shared machine."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        timer = threading.Timer(TIMEOUT[0], proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        wall = time.perf_counter() - start
        if wall >= TIMEOUT[0]:
            raise RuntimeError(f"killed after {TIMEOUT[0]:.0f} s (--timeout)")
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"exit {os.waitstatus_to_exitcode(status)}: {stderr.strip()[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout


def venv_python(name: str) -> Path:
    """The venv's Python, made (or brought to its pins) on first use; installs run one at a time."""
    spec = VENVS[name]
    venv = VENV_ROOT / name
    python = venv / "bin" / "python"
    marker = venv / "dpcli-bench-pins.txt"
    wanted = "\n".join(spec["first"] + spec["pins"])
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    log(f"installing {name} into {venv}: {' '.join(spec['first'] + spec['pins'])} ...")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for group in (spec["first"], spec["pins"]):
        if group:
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", *group], check=True)
    marker.write_text(wanted)
    return python


def peer_runner(venv: str, script: str, extra: tuple[str, ...] = ()
                ) -> Callable[[Job], tuple[float, float, float, dict]]:
    def run(job: Job) -> tuple[float, float, float, dict]:
        python = sys.executable if venv == "" else str(venv_python(venv))
        argv = [python, str(PEERS / script), "--data", str(job.data), "--domain", str(job.domain),
                "--rho", repr(job.rho), "--epsilon", repr(job.epsilon), "--delta", repr(job.delta),
                "--rows", str(job.rows), "--seed", str(job.seed), "--out", str(job.out), *extra]
        wall, cpu, peak, stdout = run_child(argv)
        return wall, cpu, peak, json.loads(stdout.strip().splitlines()[-1])
    return run


def dpcli_spec(job: Job, spec_path: Path) -> None:
    """A `dpcli synth` spec over the discretised file: every column a category whose keys are its codes (so the
    output's values are the codes), the privacy as (ε, δ) for dpcli's own conversion, the true n as the rows."""
    domain = json.loads(job.domain.read_text())
    lines = ["version: 1", "dataset: bench_synth", f"input: {job.data}",
             f"privacy: {{unit: row, neighbours: add_remove, epsilon: {job.epsilon!r}, delta: {job.delta!r}}}",
             "columns:"]
    lines += [f"  {c}: {{type: category, categories: [{', '.join(repr(str(k)) for k in range(domain['sizes'][c]))}]}}"
              for c in domain["columns"]]
    lines += ["synth:", "  method: mst", f"  rows: {job.rows}", "  columns:"]
    lines += [f"    {c}: {{}}" for c in domain["columns"]]
    spec_path.write_text("\n".join(lines) + "\n")


def dpcli_has_synth() -> bool:
    found = subprocess.run([sys.executable, "-m", "dpcli", "synth", "--help"], capture_output=True)
    return found.returncode == 0


def run_dpcli(job: Job) -> tuple[float, float, float, dict]:
    """`dpcli synth` as a whole process on a generated spec, with its own ledger; its CSV read back as codes."""
    work = job.out.parent / f"dpcli-{job.out.stem}"
    work.mkdir(exist_ok=True)
    spec, ledger, output = work / "synth.yaml", work / "ledger.jsonl", work / "synth.csv"
    dpcli_spec(job, spec)
    dpcli = [sys.executable, "-m", "dpcli"]
    subprocess.run([*dpcli, "budget", "set", "bench_synth", "--epsilon", "100", "--delta", "1e-3",
                    "--ledger", str(ledger)], check=True, capture_output=True)
    wall, cpu, peak, _ = run_child([*dpcli, "synth", str(spec), "-o", str(output), "--ledger", str(ledger), "--quiet"])
    with output.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        domain = json.loads(job.domain.read_text())
        order = [header.index(c) for c in domain["columns"]]
        codes = np.array([[int(row[i]) if row[i] != "" else -1 for i in order] for row in reader], dtype=np.int64)
    np.savetxt(job.out, codes, fmt="%d", delimiter=",", header=",".join(domain["columns"]), comments="")
    import dpcli as dpcli_package

    return wall, cpu, peak, {"version": f"dpcli {dpcli_package.__version__}", "noise": "exact (discrete Gaussian)",
                        "budget": "(ε, δ) in the spec, dpcli's conversion"}


RUNNERS: dict[str, Callable[[Job], tuple[float, float, float, dict]]] = {
    "floor": peer_runner("", "floor.py"),
    "smartnoise-mst": peer_runner("smartnoise", "smartnoise_mst.py"),
    "opendp-mst": peer_runner("opendp", "opendp_contingency.py", ("--algorithm", "mst")),
    "opendp-aim": peer_runner("opendp", "opendp_contingency.py", ("--algorithm", "aim")),
    "mbi-mst": peer_runner("mbi", "mbi_mst.py"),
    "dpcli": run_dpcli,
}


def table(results: list[Result]) -> str:
    rows = ["| tool | ε | 1-way TV | 2-way TV | 3-way TV | wall s | CPU s | peak MiB | runs | noise | version |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.failed or not r.tv:
            rows.append(f"| {r.tool} | {r.epsilon:g} | {r.failed or 'pending'} | | | | | | 0 | | |")
            continue
        tv = np.mean(np.array(r.tv), axis=0)
        rows.append(f"| {r.tool} | {r.epsilon:g} | {tv[0]:.4f} | {tv[1]:.4f} | {tv[2]:.4f} | "
                    f"{np.mean(r.wall):.1f} | {np.mean(r.cpu):.1f} | {max(r.peak_mib):.0f} | {len(r.tv)} | "
                    f"{r.info.get('noise', '')} | {r.info.get('version', '')} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {', '.join(TOOLS)}")
    parser.add_argument("--epsilons", default="0.3,1,3")
    parser.add_argument("--delta", type=float, default=1e-9)
    parser.add_argument("--repeat", type=int, default=3, help="runs per (tool, ε)")
    parser.add_argument("--triples", type=int, default=100, help="3-way marginals sampled (seeded)")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed (a failure)")
    parser.add_argument("--workdir", type=Path, help="where the codes, domain and outputs go (default: a temp dir)")
    args = parser.parse_args()
    TIMEOUT[0] = args.timeout
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        parser.error(f"unknown tools: {', '.join(sorted(unknown))}")
    epsilons = [float(e) for e in args.epsilons.split(",")]

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dpcli-bench-synth-"))
    workdir.mkdir(parents=True, exist_ok=True)
    data_path, domain_path, true = discretise(ADULT, workdir)
    shape = [sizes()[c] for c in COLUMNS]
    rng = np.random.default_rng(args.seed)
    all_triples = list(itertools.combinations(range(len(COLUMNS)), 3))
    triples = [all_triples[i] for i in sorted(rng.choice(len(all_triples), min(args.triples, len(all_triples)),
                                                           replace=False))]
    log(f"{len(true)} rows, {len(COLUMNS)} columns, sizes {shape}; codes and domain in {workdir}")

    results: list[Result] = []
    for tool in tools:
        for epsilon in epsilons:
            result = Result(tool, epsilon)
            results.append(result)
            extras = {tool: result}  # the tool's row, and a row per further output of the same runs
            if tool == "dpcli" and not dpcli_has_synth():
                log("dpcli: `dpcli synth` does not exist in this tree yet: skipped (pending)")
                continue
            rho = rho_of(epsilon, args.delta)
            for rep in range(args.repeat):
                job = Job(data_path, domain_path, rho, epsilon, args.delta, len(true), args.seed * 1000 + rep,
                          workdir / f"{tool}-eps{epsilon:g}-{rep}.csv")
                try:
                    wall, cpu, peak, info = RUNNERS[tool](job)
                except (RuntimeError, subprocess.CalledProcessError, OSError) as error:
                    result.failed = f"killed at {args.timeout:.0f} s" if "--timeout" in str(error) else "failed"
                    log(f"{tool} ε={epsilon:g} run {rep}: FAILED {error}")
                    break
                outputs = {tool: job.out} | {label: Path(path) for label, path in info.pop("extra", {}).items()}
                for label, path in outputs.items():
                    if label not in extras:
                        extras[label] = Result(label, epsilon)
                        results.append(extras[label])
                    synthetic = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
                    if synthetic.shape != true.shape:
                        log(f"{label} ε={epsilon:g} run {rep}: shape {synthetic.shape}, not {true.shape}")
                    outside = int(((synthetic < 0) | (synthetic >= np.array(shape))).sum())
                    tv = tv_distances(true, synthetic, shape, triples)
                    extras[label].tv.append(tv)
                    extras[label].wall.append(wall)
                    extras[label].cpu.append(cpu)
                    extras[label].peak_mib.append(peak)
                    extras[label].info = info
                    log(f"{label} ε={epsilon:g} ρ={rho:.6g} run {rep}: TV {tv[0]:.4f} {tv[1]:.4f} {tv[2]:.4f}, "
                        f"{wall:.1f} s ({cpu:.1f} s CPU), {peak:.0f} MiB, {outside} cells outside the domain; "
                        f"{info.get('budget', '')}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; "
          f"Adult ({len(true)} rows, {len(COLUMNS)} columns), δ = {args.delta:g}, ρ = (√(ε+L) − √L)², "
          f"L = ln(1/δ); {len(triples)} of {len(all_triples)} 3-way marginals (seed {args.seed})\n")
    print(table(results))
    if args.workdir is None:
        shutil.rmtree(workdir)
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
