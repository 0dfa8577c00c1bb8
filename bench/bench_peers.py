#!/usr/bin/env python3
"""dpcli beside the libraries a user would pick instead: the same release, timed, measured and scored.

The release, on bench_release.py's cached synthetic people CSV (generated, not committed), row-level, pure ε = 1 split
evenly over four statistics (0.25 each):

1. a count by state (the 51 declared states; other values dropped);
2. a histogram of age with the declared one-year bins 18..90 (ages clamped to [18, 90], missing ones dropped);
3. a mean of hours_per_week (bounds [0, 99]) by sex (the declared Female, Male);
4. the median of age (bounds [18, 90], integer candidates).

Each tool runs in its own venv under ~/.cache/dpcli-bench/venvs/peers-NAME (outside the repository), made on first use
with the exact pins of PEERS; a tool that cannot install here is skipped with pip's error. dpcli runs as the
`dpcli release` command (whole process) and as `dpcli.release(...)` (the library call, timed inside a process
after its imports). Each peer runs as a fresh process (whole process) and is timed inside it after its imports
(the library call: reading the file and the release; Tumult's after its Spark session starts). Peak RSS is the whole
process's, through a fork launcher (os.wait4's ru_maxrss, bench/measure.py). Error: the mean absolute
error over the cells of each statistic against the true answers (computed here with polars, same clamping and
dropping), averaged over the runs. Times are the best of the runs.

Usage::

    .venv/bin/python bench/bench_peers.py                         # 1M rows, every tool, 3 runs
    .venv/bin/python bench/bench_peers.py --rows 10000000 --tools dpcli,opendp
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from measure import measured, peak_bytes  # noqa: E402 - a command's own peak RSS, through a fork launcher

VENVS = Path.home() / ".cache" / "dpcli-bench" / "venvs"
EPSILON = 1.0
STATISTICS = 4
PEERS: dict[str, list[str]] = {
    "opendp": ["opendp[polars]==0.16.0"],
    "tumult": ["tmlt.analytics==0.21.0"],
    "pipelinedp": ["pipeline-dp==0.3.1", "pandas==2.3.3"],  # pandas: reading the CSV
    "smartnoise": ["smartnoise-sql==1.0.10"],
}
AGE = (18, 90)
HOURS = (0, 99)

# What each tool cannot match, whose noise is exact, which median: from each tool's docs and installed code (see
# docs/benchmarks.md, "Peers side by side", for the sources).
NOTES = {
    "dpcli": ("exact discrete Laplace (CKS 2020, integers only, from the CSPRNG)",
              "permute-and-flip over the integer candidates",
              "declared keys and bins; add/remove; δ = 0"),
    "opendp": ("exact samplers (discrete Laplace on integer sums and counts)",
               "quantile score over the candidates, noisy max under pure DP = permute-and-flip (exact)",
               "declared keys (with_keys); add/remove; δ = 0; mean = noisy sum / noisy count"),
    "tumult": ("exact: Tumult Core samples by inverse CDF in arbitrary precision (arb/FLINT); two-sided geometric "
               "on integer counts and sums",
               "exponential mechanism over the intervals between the sorted values (Gumbel noise, inverse CDF in "
               "arb), then a uniform draw inside the interval",
               "declared keys (KeySet); add/remove (AddOneRow); δ = 0"),
    "pipelinedp": ("PyDP (Google DP library) Laplace: geometric at a power-of-2 granularity (Secure Noise "
                   "Generation), floating-point safe, not exact",
                   "quantile tree (Google DP library QuantileTree)",
                   "declared keys (public_partitions); add/remove of a row as its own unit; δ = 0; "
                   "row bounds declared enforced"),
    "smartnoise": ("OpenDP 0.14 make_laplace on floats (lattice-sampled, floating-point safe), counts too",
                   "none: PERCENTILE_CONT/_DISC are in its grammar but have no private mechanism",
                   "no declared keys: GROUP BY releases the keys in the data; δ = 0 only with censor_dims off (no "
                   "thresholding of rare keys: private only for public keys, as here); add/remove; AVG = noisy SUM / "
                   "noisy COUNT, ε set so get_privacy_cost is 0.25 per statistic"),
}



def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- the children
# Each prints one JSON line: {"seconds": the library call, "count": {state: v}, "hist": {age: v},
# "mean": {sex: v}, "median": v or null, "version": "..."}.


def child_dpcli(csv: str, public: dict) -> dict:
    import polars as pl

    import dpcli

    sys.path.insert(0, str(HERE))
    import bench_release as br

    spec = dpcli.parse_spec(spec_yaml())
    with tempfile.TemporaryDirectory(prefix="dpcli-peers-") as tmp:
        ledger, out = Path(tmp) / "ledger.jsonl", Path(tmp) / "out.csv"
        br._run([str(br.find_dpcli()), "budget", "set", "people", "--epsilon", "1000", "--ledger", str(ledger)])
        t0 = time.perf_counter()
        dpcli.release(spec, input=Path(csv), output=out, ledger=ledger)
        seconds = time.perf_counter() - t0
        result = parse_dpcli_output(pl.read_csv(out, infer_schema_length=0))
    return {"seconds": seconds, **result, "version": dpcli.__version__}


def child_opendp(csv: str, public: dict) -> dict:
    import warnings

    import opendp.prelude as dp
    import polars as pl

    warnings.simplefilter("ignore", FutureWarning)
    dp.enable_features("contrib")
    t0 = time.perf_counter()
    schema = {"age": pl.Int64, "sex": pl.String, "state": pl.String, "education": pl.String,
              "employed": pl.String, "hours_per_week": pl.Int64, "income": pl.Float64}
    context = dp.Context.compositor(
        data=pl.scan_csv(csv, schema=schema, ignore_errors=True),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=EPSILON),
        split_evenly_over=STATISTICS,
        margins=[dp.polars.Margin(by=[], max_length=public["max_length"])],  # a public bound on the row count
    )
    lo, hi = AGE
    ages = pl.col("age").fill_null(lo).clip(lo, hi)  # nulls are filtered first: fill_null only tells OpenDP so
    by_state = (context.query().group_by("state").agg(dp.len())
                .with_keys(pl.LazyFrame({"state": public["states"]})).release().collect())
    age_hist = (context.query().filter(pl.col("age").is_not_null()).with_columns(ages)
                .group_by("age").agg(dp.len())
                .with_keys(pl.LazyFrame({"age": list(range(lo, hi + 1))})).release().collect())
    mean_hours = (context.query().filter(pl.col("hours_per_week").is_not_null())
                  .group_by("sex").agg(pl.col("hours_per_week").fill_null(0).dp.mean(HOURS))
                  .with_keys(pl.LazyFrame({"sex": public["sexes"]})).release().collect())
    median = (context.query().filter(pl.col("age").is_not_null())
              .select(ages.dp.median(list(range(lo, hi + 1)))).release().collect())
    seconds = time.perf_counter() - t0
    return {"seconds": seconds,
            "count": dict(zip(by_state["state"], by_state["len"], strict=True)),
            "hist": {str(a): v for a, v in zip(age_hist["age"], age_hist["len"], strict=True)},
            "mean": dict(zip(mean_hours["sex"], mean_hours["hours_per_week"], strict=True)),
            "median": median.item(), "version": f"opendp {dp.__version__}, polars {pl.__version__}"}


def _pandas_frame(csv: str):
    """The CSV through pandas, as PipelineDP's and SmartNoise's users read it: unparseable numbers become missing."""
    import pandas as pd

    df = pd.read_csv(csv, usecols=["age", "sex", "state", "hours_per_week"], dtype=str, keep_default_na=False)
    df["age"] = pd.to_numeric(df["age"], errors="coerce")
    df["hours_per_week"] = pd.to_numeric(df["hours_per_week"], errors="coerce")
    return df


def child_pipelinedp(csv: str, public: dict) -> dict:
    import pipeline_dp

    t0 = time.perf_counter()
    df = _pandas_frame(csv)
    ages = df["age"].dropna().clip(*AGE).astype(int).tolist()
    hours = df[["sex", "hours_per_week"]].dropna()
    hours_rows = list(zip(hours["sex"], hours["hours_per_week"].clip(*HOURS).astype(float), strict=True))
    states = df["state"].tolist()
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    laplace = pipeline_dp.NoiseKind.LAPLACE

    def params(metric, bounds=None) -> pipeline_dp.AggregateParams:
        # one row = one privacy unit, in one partition once: the bounds are declared already enforced
        return pipeline_dp.AggregateParams(
            noise_kind=laplace, metrics=[metric], max_partitions_contributed=1, max_contributions_per_partition=1,
            min_value=bounds[0] if bounds else None, max_value=bounds[1] if bounds else None,
            contribution_bounds_already_enforced=True)

    def extract(partition, value) -> pipeline_dp.DataExtractors:
        return pipeline_dp.DataExtractors(partition_extractor=partition, value_extractor=value)

    count = engine.aggregate(states, params(pipeline_dp.Metrics.COUNT), extract(lambda r: r, lambda r: 0),
                             public_partitions=public["states"])
    hist = engine.aggregate(ages, params(pipeline_dp.Metrics.COUNT), extract(lambda r: r, lambda r: 0),
                            public_partitions=list(range(AGE[0], AGE[1] + 1)))
    mean = engine.aggregate(hours_rows, params(pipeline_dp.Metrics.MEAN, HOURS),
                            extract(lambda r: r[0], lambda r: r[1]), public_partitions=public["sexes"])
    median = engine.aggregate(ages, params(pipeline_dp.Metrics.PERCENTILE(50), AGE),
                              extract(lambda r: 0, lambda r: r), public_partitions=[0])
    accountant.compute_budgets()
    count_d = {k: v.count for k, v in count}
    hist_d = {str(k): v.count for k, v in hist}
    mean_d = {k: v.mean for k, v in mean}
    median_v = next(v.percentile_50 for _, v in median)
    seconds = time.perf_counter() - t0
    from importlib.metadata import version
    return {"seconds": seconds, "count": count_d, "hist": hist_d, "mean": mean_d, "median": median_v,
            "version": f"pipeline-dp {version('pipeline-dp')}, python-dp {version('python-dp')}"}


def child_smartnoise(csv: str, public: dict) -> dict:
    import snsql
    from snsql import Privacy

    t0 = time.perf_counter()
    df = _pandas_frame(csv)
    target = EPSILON / STATISTICS

    def run(frame, columns: dict, query: str):
        meta = {"peers": {"people": {"people": {"row_privacy": True, "censor_dims": False, "rows": len(frame),
                                                **columns}}}}
        reader = snsql.from_df(frame, privacy=Privacy(epsilon=target, delta=0.0), metadata=meta)
        cost = reader.get_privacy_cost(query)[0]  # e.g. AVG is a SUM and a COUNT: 2ε
        reader = snsql.from_df(frame, privacy=Privacy(epsilon=target * target / cost, delta=0.0), metadata=meta)
        return reader.execute(query)

    string = {"type": "string"}
    rows = run(df[["state"]], {"state": string}, "SELECT state, COUNT(*) AS n FROM people.people GROUP BY state")
    count = {r[0]: r[1] for r in rows[1:]}
    age_frame = df[["age"]].dropna().clip(*AGE).astype(int)
    rows = run(age_frame, {"age": {"type": "int", "lower": AGE[0], "upper": AGE[1]}},
               "SELECT age, COUNT(*) AS n FROM people.people GROUP BY age")
    hist = {str(r[0]): r[1] for r in rows[1:]}
    hours_frame = df[["sex", "hours_per_week"]].dropna()
    hours_frame = hours_frame.assign(hours_per_week=hours_frame["hours_per_week"].clip(*HOURS).astype(int))
    rows = run(hours_frame, {"sex": string, "hours_per_week": {"type": "int", "lower": HOURS[0], "upper": HOURS[1]}},
               "SELECT sex, AVG(hours_per_week) AS m FROM people.people GROUP BY sex")
    mean = {r[0]: r[1] for r in rows[1:]}
    seconds = time.perf_counter() - t0
    from importlib.metadata import version
    return {"seconds": seconds, "count": count, "hist": hist, "mean": mean, "median": None,
            "version": f"smartnoise-sql {version('smartnoise-sql')}, opendp {version('opendp')}"}


def child_tumult(csv: str, public: dict) -> dict:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as sf
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    from tmlt.analytics import AddOneRow, KeySet, PureDPBudget, QueryBuilder, Session

    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this venv's, which has tmlt
    spark = (SparkSession.builder.master("local[2]")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="dpcli-peers-spark-")).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    t0 = time.perf_counter()
    schema = StructType([StructField("age", LongType()), StructField("sex", StringType()),
                         StructField("state", StringType()), StructField("education", StringType()),
                         StructField("employed", StringType()), StructField("hours_per_week", LongType()),
                         StructField("income", StringType())])
    # PERMISSIVE: an unparseable number becomes null, as in the other tools
    df = spark.read.csv(csv, header=True, schema=schema, mode="PERMISSIVE").select("age", "sex", "state",
                                                                                     "hours_per_week")

    def clamp(column: str, bounds: tuple[int, int]):
        # Spark's greatest/least skip nulls (greatest(null, 18) = 18): a missing value must stay missing
        value = sf.col(column)
        return sf.when(value.isNotNull(), sf.least(sf.greatest(value, sf.lit(bounds[0])), sf.lit(bounds[1])))

    df = df.withColumn("age", clamp("age", AGE)).withColumn("hours_per_week", clamp("hours_per_week", HOURS))
    session = Session.from_dataframe(privacy_budget=PureDPBudget(EPSILON), source_id="people", dataframe=df,
                                     protected_change=AddOneRow())
    share = PureDPBudget(EPSILON / STATISTICS)
    count = session.evaluate(QueryBuilder("people").groupby(KeySet.from_dict({"state": public["states"]})).count(),
                             share).collect()
    hist = session.evaluate(QueryBuilder("people").drop_null_and_nan(["age"])
                            .groupby(KeySet.from_dict({"age": list(range(AGE[0], AGE[1] + 1))})).count(),
                            share).collect()
    mean = session.evaluate(QueryBuilder("people").drop_null_and_nan(["hours_per_week"])
                            .groupby(KeySet.from_dict({"sex": public["sexes"]}))
                            .average("hours_per_week", low=HOURS[0], high=HOURS[1], name="m"), share).collect()
    median = session.evaluate(QueryBuilder("people").drop_null_and_nan(["age"])
                              .median("age", low=AGE[0], high=AGE[1], name="med"), share).collect()
    seconds = time.perf_counter() - t0
    from importlib.metadata import version
    return {"seconds": seconds, "descendants_mib": descendants_peak_mib(),
            "count": {r["state"]: r["count"] for r in count},
            "hist": {str(r["age"]): r["count"] for r in hist}, "mean": {r["sex"]: r["m"] for r in mean},
            "median": median[0]["med"],
            "version": f"tmlt.analytics {version('tmlt.analytics')}, pyspark {version('pyspark')}"}


def descendants_peak_mib() -> int:
    """The summed peak RSS (VmHWM) of this process's live descendants: Spark's JVM and its Python workers, which
    the fork launcher's wait4 does not see (it reports the largest waited-for process only)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    mine, total = {os.getpid()}, 0
    for _ in range(10):  # a few generations
        mine |= {pid for pid, ppid in parents.items() if ppid in mine}
    for pid in mine - {os.getpid()}:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return total // 1024


CHILDREN = {"dpcli": child_dpcli, "opendp": child_opendp, "tumult": child_tumult, "pipelinedp": child_pipelinedp,
            "smartnoise": child_smartnoise}


# --------------------------------------------------------------------------------------------- dpcli's side


def spec_yaml() -> str:
    sys.path.insert(0, str(HERE))
    import bench_release as br

    return br.SPEC_YAML.replace("epsilon: 1.0}", f"epsilon: {EPSILON}}}") + (
        "  - {name: median_age, kind: median, column: age}\n")


def parse_dpcli_output(table) -> dict:
    """The four statistics out of a dpcli release table (all columns read as strings)."""
    def rows(name: str):
        return table.filter(table["statistic"] == name)

    count = {r["state"]: float(r["value"]) for r in rows("people_by_state").iter_rows(named=True)}
    hist = {str(int(float(r["bin_low"]))): float(r["value"]) for r in rows("age_hist").iter_rows(named=True)}
    mean = {r["sex"]: float(r["value"]) for r in rows("mean_hours_by_sex").iter_rows(named=True)}
    median = float(rows("median_age")["value"][0])
    return {"count": count, "hist": hist, "mean": mean, "median": median}


# --------------------------------------------------------------------------------------------- the parent


def truth(csv: Path, states: list[str], sexes: list[str]) -> dict:
    import polars as pl

    sys.path.insert(0, str(HERE))
    import bench_release as br

    df = (pl.scan_csv(csv, schema=br.SCHEMA, ignore_errors=True).select("age", "sex", "state", "hours_per_week")
          .collect(engine="streaming"))
    count = df.filter(pl.col("state").is_in(states)).group_by("state").len()
    ages = df.select(pl.col("age").drop_nulls().clip(*AGE))
    hist = ages.group_by("age").len()
    mean = (df.filter(pl.col("sex").is_in(sexes), pl.col("hours_per_week").is_not_null()).group_by("sex")
            .agg(pl.col("hours_per_week").clip(*HOURS).mean()))
    return {"count": dict(zip(count["state"], count["len"], strict=True)),
            "hist": {str(a): v for a, v in zip(hist["age"], hist["len"], strict=True)},
            "mean": dict(zip(mean["sex"], mean["hours_per_week"], strict=True)),
            "median": ages["age"].quantile(0.5, "lower")}


def errors(result: dict, true: dict) -> dict:
    """Mean absolute error over the declared cells of each statistic (a declared cell missing from a tool's answer
    counts as 0; cells a tool released beyond the declared ones are not scored)."""
    out = {}
    for stat in ("count", "hist", "mean"):
        cells = true[stat]
        out[stat] = sum(abs(float(result[stat].get(k) or 0) - v) for k, v in cells.items()) / len(cells)
    out["median"] = None if result["median"] is None else abs(float(result["median"]) - true["median"])
    return out


def venv_python(tool: str) -> tuple[Path | None, str]:
    """The tool's venv Python, made on first use with the exact pins; (None, pip's error) if it cannot install."""
    venv = VENVS / f"peers-{tool}"
    python = venv / "bin" / "python"
    marker = venv / "peers-installed.txt"
    if marker.exists() and marker.read_text() == "\n".join(PEERS[tool]):
        return python, ""
    log(f"installing {' '.join(PEERS[tool])} into {venv} (once) ...")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run(["nice", "-n", "19", str(python), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *PEERS[tool]], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
    marker.write_text("\n".join(PEERS[tool]))
    return python, ""


def timed(argv: list[str], workdir: Path) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in MiB, stdout) of argv run through the fork launcher; RuntimeError if it fails."""
    peak = workdir / "peak"
    t0 = time.perf_counter()
    proc = subprocess.run(measured(argv, peak), capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    return seconds, peak_bytes(peak) >> 20, proc.stdout


def row_text(tool: str, row: tuple | None, why: str) -> str:
    """One line of the printed table."""
    if row is None:
        return f"| {tool} | skipped: {why} | | | | | | | |"
    proc_s, lib_s, peak_mib, e, version = row
    median = "n/a" if e["median"] is None else f"{e['median']:.2f}"
    return (f"| {tool} | {proc_s:.2f} | {lib_s:.2f} | {peak_mib} | {e['count']:.2f} | {e['hist']:.2f} | "
            f"{e['mean']:.4f} | {median} | {version} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the synthetic CSV (default 1,000,000)")
    ap.add_argument("--runs", type=int, default=3, help="runs per tool: best time, mean error (default 3)")
    ap.add_argument("--tools", default="dpcli," + ",".join(PEERS), help="comma-separated (default: all)")
    ap.add_argument("--child", nargs=3, metavar=("TOOL", "CSV", "PUBLIC_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        tool, csv, public = args.child
        print(json.dumps(CHILDREN[tool](csv, json.loads(public)), default=float))
        return 0

    sys.path.insert(0, str(HERE))
    import bench_release as br

    csv = br.dataset(args.rows)
    dpcli = br.find_dpcli()
    public = {"states": br.STATES, "sexes": br.SEXES, "max_length": 10 * args.rows}
    log("true answers (polars) ...")
    true = truth(csv, br.STATES, br.SEXES)
    table = []
    with tempfile.TemporaryDirectory(prefix="dpcli-peers-") as tmp:
        workdir = Path(tmp)
        spec = workdir / "people.yaml"
        spec.write_text(spec_yaml(), encoding="utf-8")
        for tool in args.tools.split(","):
            if tool == "dpcli":
                python: Path | None = Path(sys.executable)
                ledger = workdir / "ledger.jsonl"
                subprocess.run([str(dpcli), "budget", "set", "people", "--epsilon", "1000", "--ledger", str(ledger)],
                               check=True, capture_output=True)
            else:
                python, why = venv_python(tool)
                if python is None:
                    log(f"skipping {tool}: it does not install here: {why}")
                    table.append((tool, None, why))
                    continue
            child = [str(python), str(Path(__file__).resolve()), "--child", tool, str(csv), json.dumps(public)]
            proc_s = lib_s = float("inf")
            peak_mib, errs, version = 0, [], ""
            try:
                for i in range(args.runs):
                    log(f"{args.rows:,} rows: {tool} run {i + 1}/{args.runs} ...")
                    if tool == "dpcli":
                        import polars as pl

                        out = workdir / f"dpcli_{i}.csv"
                        seconds, peak, _ = timed([str(dpcli), "release", str(spec), "--input", str(csv), "--output",
                                                  str(out), "--ledger", str(ledger), "--quiet"], workdir)
                        result = parse_dpcli_output(pl.read_csv(out, infer_schema_length=0))
                        lib = json.loads(subprocess.run(child, check=True, capture_output=True, text=True)
                                         .stdout.strip().splitlines()[-1])
                        lib_seconds, version = lib["seconds"], lib["version"]
                    else:
                        seconds, peak, stdout = timed(child, workdir)
                        result = json.loads(stdout.strip().splitlines()[-1])
                        lib_seconds, version = result["seconds"], result["version"]
                        peak += result.get("descendants_mib", 0)  # Tumult: the JVM and Spark's Python workers
                    proc_s, lib_s, peak_mib = min(proc_s, seconds), min(lib_s, lib_seconds), max(peak_mib, peak)
                    errs.append(errors(result, true))
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                detail = exc.stderr[-1500:] if isinstance(exc, subprocess.CalledProcessError) else str(exc)
                log(f"{tool} failed: {detail}")
                table.append((tool, None, f"failed: {detail.strip().splitlines()[-1] if detail.strip() else exc}"))
                continue
            mean_err = {k: (None if errs[0][k] is None else sum(e[k] for e in errs) / len(errs)) for k in errs[0]}
            table.append((tool, (proc_s, lib_s, peak_mib, mean_err, version), ""))
            log(row_text(*table[-1]))

    print(f"{args.rows:,} rows; count by state (51 keys), age histogram (73 bins), mean hours by sex, median age; "
          f"pure ε = {EPSILON} (0.25 each); best of {args.runs} runs for times, mean of {args.runs} for errors; "
          f"{os.cpu_count()} CPUs")
    print("| tool | process s | library s | peak RSS MiB | MAE count | MAE hist | MAE mean | median abs err "
          "| version |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for tool, row, why in table:
        print(row_text(tool, row, why))
    print()
    print("| tool | noise | median algorithm | where it matches / cannot match |")
    print("|---|---|---|---|")
    for tool, *_ in table:
        print(f"| {tool} | " + " | ".join(NOTES[tool]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
