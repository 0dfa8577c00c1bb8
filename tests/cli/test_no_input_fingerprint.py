"""Nothing published depends on the input's bytes (issue 8, finding 1): no fingerprint of the input in the ledger, the
sidecar, the release store or any message of any command, on every error path; through the real `dpcli` command."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from tests.cli.test_cli import CANARY, dpcli, no_data_in

# -- nothing published depends on the input's bytes (issue 8, finding 1) ----------------------------------------


def _release_in_fresh_ledger(work: Path, data: Path, tag: str, *extra: str) -> tuple[dict, dict, list[str], str]:
    """One release under a fixed release id into a new ledger: (spend record, sidecar, store names, stderr)."""
    led = work / f"ledger-{tag}.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", str(led)).returncode == 0
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(data), "-o", str(work / f"out-{tag}.csv"),
              "--ledger", str(led), "--release-id", "snapshot", "--verbose", *extra)
    assert r.returncode == 0, r.stderr
    spend = [json.loads(line) for line in led.read_text().splitlines()][1]
    meta = json.loads((work / f"out-{tag}.csv.meta.json").read_text())
    store = sorted(p.name for p in (work / f"ledger-{tag}.jsonl.releases").iterdir())
    return spend, meta, store, r.stderr.decode()


def test_no_fingerprint_of_the_input_in_ledger_sidecar_store_or_messages(work: Path) -> None:
    """Two inputs that differ in one person's row (in a column the spec never uses) give spend records, sidecars,
    store names and --verbose output that are equal but for time and the hashes that cover it. The old sidecar and
    spend record carried the input's sha256, from which a whole row could be recovered by guessing."""
    original = work / "data.csv"
    other = work / "other.csv"
    other.write_bytes(original.read_bytes().replace(CANARY.encode(), b"Alice", 1))
    a_spend, a_meta, a_store, a_err = _release_in_fresh_ledger(work, original, "a")
    b_spend, b_meta, b_store, b_err = _release_in_fresh_ledger(work, other, "b")
    volatile = ("time", "hash", "prev")
    assert {k: v for k, v in a_spend.items() if k not in volatile} == {
        k: v for k, v in b_spend.items() if k not in volatile
    }
    a_meta["ledger"].pop("head"), b_meta["ledger"].pop("head")
    a_meta.pop("output_sha256"), b_meta.pop("output_sha256")  # the noisy table's own hash (public, differs by noise)
    assert a_meta.pop("release_time") == a_spend["time"][:19] + "Z"  # the spend's time, as the ledger's: volatile
    assert b_meta.pop("release_time") == b_spend["time"][:19] + "Z"
    assert a_meta == b_meta
    assert a_store == b_store
    def strip(text: str) -> str:  # the run's time and the head hash (it covers the record's time)
        text = re.sub(r"done in [0-9.]+ s", "", re.sub(r"head [0-9a-f]{16}", "", text))
        return text.replace("ledger-a", "L").replace("ledger-b", "L").replace("out-a", "O").replace("out-b", "O")

    assert strip(a_err) == strip(b_err)
    for digest in (hashlib.sha256, hashlib.sha1, hashlib.md5):
        for data in (original, other):
            h = digest(data.read_bytes()).hexdigest()
            everything = json.dumps([a_spend, a_meta, b_spend, b_meta, a_store, b_store]) + a_err + b_err
            assert h not in everything
            assert h[:16] not in everything
    assert str(work) not in json.dumps(a_meta)  # no path of the operator's machine in the sidecar
    assert "input_sha256" not in json.dumps(a_meta)
    assert "input_sha256" not in a_spend
    # then every command, and every error path, that reads an input (issue 23, finding 2: a frequency spec run on
    # the raw data printed `the input (sha256 9b752b285bdeac9c…) is not a randomize output`)
    texts = _every_command_and_error_path(work, original)
    inputs = [original, other, work / "bad.csv"]
    texts += [(p.name, p.read_bytes().decode("utf-8", "replace")) for p in sorted(work.rglob("*"))
              if p.is_file() and p not in inputs]  # every file written: ledgers, heads, stores, tables, sidecars...
    leaks = _input_hashes_in(texts, [p.read_bytes() for p in inputs])
    assert not leaks, leaks


RANDOMIZE_SPEC = """\
version: 1
dataset: toy_rr
privacy: {unit: row, neighbours: replace, epsilon: 2}
columns:
  sex: {type: category, categories: [F, M]}
randomize: {columns: [sex]}
"""

FREQUENCY_SPEC = """\
version: 1
dataset: toy_rr
privacy: {neighbours: replace}
columns:
  sex: {type: category, categories: [F, M]}
statistics:
  - {name: sexes, kind: frequency, column: sex, randomized: {epsilon: %s}}
"""


def _every_command_and_error_path(work: Path, data: Path) -> list[tuple[str, str]]:
    """(command, stdout + stderr) of every command that reads an input or the ledger, on success and on each error
    path (in process, each with its exit code)."""
    led, spec, rr = str(work / "L.jsonl"), str(work / "spec.yaml"), str(work / "rr.yaml")
    (work / "rr.yaml").write_text(RANDOMIZE_SPEC)
    (work / "freq.yaml").write_text(FREQUENCY_SPEC % "2")
    (work / "freq-other-eps.yaml").write_text(FREQUENCY_SPEC % "1")
    (work / "bad.csv").write_bytes(data.read_bytes().replace(b",sex,", b",sx,", 1))  # a declared column missing
    release = ("release", spec, "-i", str(data), "--ledger", led)
    runs: list[tuple[int, tuple[str, ...]]] = [
        (4, (*release, "-o", str(work / "r0.csv"))),  # no ledger yet: no cap (exit 4)
        (0, ("budget", "set", "toy", "--epsilon", "2.5", "--ledger", led)),
        (0, ("budget", "set", "toy_rr", "--epsilon", "2", "--ledger", led)),
        (0, ("check", spec, "-i", str(data))),
        (3, ("check", spec, "-i", str(work / "bad.csv"))),
        (0, ("check", rr, "-i", str(data))),
        (0, ("plan", spec, "--ledger", led)),
        (0, ("plan", spec, "--json", "--ledger", led)),
        (0, ("plan", rr)),
        (0, ("audit", rr, "--trials", "1000")),
        (0, ("init", str(data))),
        (0, ("init", str(data), "-o", str(work / "init.yaml"))),
        (0, (*release, "-o", str(work / "r1.csv"), "--verbose", "--release-id", "one")),
        (0, (*release, "-o", str(work / "r1.csv"), "--json", "--release-id", "one")),  # the re-issue
        (3, ("release", spec, "-i", str(work / "bad.csv"), "--ledger", led, "-o", str(work / "r4.csv"))),
        (0, (*release, "-o", str(work / "r2.csv"), "--summary-md", str(work / "summary.md"))),
        (4, (*release, "-o", str(work / "r3.csv"))),  # the cap exceeded
        (3, ("randomize", rr, "-i", str(work / "bad.csv"), "--ledger", led, "-o", str(work / "rr-bad.csv"))),
        (0, ("randomize", rr, "-i", str(data), "--ledger", led, "-o", str(work / "rr.csv"), "--release-id", "r")),
        (0, ("randomize", rr, "-i", str(data), "--ledger", led, "-o", str(work / "rr.csv"), "--release-id", "r",
             "--json")),
        (0, ("release", str(work / "freq.yaml"), "-i", str(work / "rr.csv"), "--ledger", led, "-o",
             str(work / "f.csv"), "--verbose")),
        (3, ("release", str(work / "freq.yaml"), "-i", str(data), "--ledger", led, "-o", str(work / "f1.csv"))),
        (3, ("release", str(work / "freq.yaml"), "-i", str(data), "--ledger", str(work / "none.jsonl"), "-o",
             str(work / "f2.csv"))),  # no ledger at all
        (3, ("release", str(work / "freq-other-eps.yaml"), "-i", str(work / "rr.csv"), "--ledger", led, "-o",
             str(work / "f3.csv"))),  # the frequency's ε does not match
        (0, ("report", str(work / "r2.csv"), "-o", str(work / "report.html"), "--ledger", led, "--summary-md",
             str(work / "summary.md"))),
        (0, ("budget", "show", "--ledger", led)),
        (0, ("budget", "show", "--json", "--ledger", led)),
        (0, ("ledger", "show", "--ledger", led)),
        (0, ("ledger", "show", "--json", "--ledger", led)),
        (0, ("ledger", "verify", "--ledger", led, "--against", str(work / "r2.csv.meta.json"))),
    ]
    texts = []
    for code, args in runs:
        r = dpcli(*args)
        assert r.returncode == code, (args, r.stderr)
        no_data_in(r)
        texts.append((" ".join(args[:2]), (r.stdout + r.stderr).decode("utf-8", "replace")))
    return texts


def _input_hashes_in(texts: list[tuple[str, str]], inputs: list[bytes]) -> list[tuple[str, str]]:
    """Every digest (sha256, sha1, md5, sha512, blake2b, blake2s) of a whole input or of one of its lines (with and
    without its line end) that shows in one of ``texts`` (where, what), as (where, its first 16 hex digits): as a
    run of hex digits that is a prefix of it (8 digits or more), or its first 16 hex digits anywhere, or its first
    10 base64 digits anywhere.

    A false alarm needs a hex run of 8 to 15 digits in the output equal to a digest's prefix (16^-8 at most each;
    the longer runs are whole hashes) or a 60-bit match: the outputs hold about 20 such runs (2 of 8 digits, the
    rest longer), so for the ~120 digests the chance is about 10^-7. The audit runs on the randomize spec only: it
    reads no input (its neighbours are synthetic), and the release spec's audit costs ~1.5 s of CPU."""
    import base64

    pieces = []
    for data in inputs:
        lines = data.splitlines(keepends=True)
        pieces += [data, *lines, *(line.rstrip(b"\r\n") for line in lines)]
    digests = {
        digest(piece).digest()
        for piece in pieces
        for digest in (hashlib.sha256, hashlib.sha1, hashlib.md5, hashlib.sha512, hashlib.blake2b, hashlib.blake2s)
    }
    found = []
    for where, text in texts:
        runs = {m.lower() for m in re.findall(r"[0-9a-fA-F]{8,}", text)}
        for raw in digests:
            hexed = raw.hex()
            b64 = [base64.b64encode(raw).decode()[:10], base64.urlsafe_b64encode(raw).decode()[:10]]
            if hexed[:16] in text.lower() or any(hexed.startswith(r) for r in runs) or any(b in text for b in b64):
                found.append((where, hexed[:16]))
    return found
