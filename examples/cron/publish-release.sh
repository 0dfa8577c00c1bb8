#!/usr/bin/env bash
# Publish one DP release a day from cron: the noisy table, its sidecar, an HTML report and a Markdown summary.
#
#   # crontab -e: every day at 02:15, the day's snapshot
#   15 2 * * *  cd /srv/stats && PATH=/srv/stats/.venv/bin:/usr/bin:/bin DPCLI_LEDGER=/srv/stats/ledger.jsonl examples/cron/publish-release.sh >>/srv/stats/dpcli.log 2>&1
#
# cron runs the line with /bin/sh, PATH=/usr/bin:/bin and hardly anything else: the line itself puts the venv that
# holds dpcli first on PATH (/srv/stats/.venv here: README.md, Install, says how to make it) and names the ledger.
# Once, before the first run, the operator sets the dataset's cap (a person decides it, not the job):
#   /srv/stats/.venv/bin/dpcli budget set adult --epsilon 10 --ledger /srv/stats/ledger.jsonl
#
# The release id is the snapshot's date, so a cron job that runs twice in a day (a retry, a manual run) writes the
# paid table again and spends nothing. When the cap is used up, dpcli exits 4 and nothing is spent or written.
# The day's files are made in a hidden folder beside it and take the dated folder's place only when the release
# succeeded: a refused or failed run leaves no folder, and a re-run leaves each file written once (the summary too).
# Every line of the log starts with the time (UTC); a paying run's lines say what it spent and the ledger record.
set -euo pipefail

SPEC="${SPEC:-examples/release.yaml}"        # the release spec (its `input:` names the day's file)
OUT_DIR="${OUT_DIR:-published}"              # where the day's folder goes
DAY="${DAY:-$(date -u +%F)}"                 # the snapshot's date: the release id

log() { while IFS= read -r line; do printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$line"; done; }
say() { printf '%s\n' "$*" | log; }

if [ -z "${DPCLI_LEDGER:-}" ]; then
  say "DPCLI_LEDGER is not set: set it on the crontab line to the ledger file or postgresql:// URL; nothing was spent" >&2
  exit 2
fi
export DPCLI_LEDGER
if ! command -v dpcli >/dev/null 2>&1; then
  say "dpcli is not on PATH ($PATH): put the bin folder of the venv that holds it on the crontab line's PATH; nothing was spent" >&2
  exit 127
fi

mkdir -p "$OUT_DIR"
stage="$OUT_DIR/.$DAY.partial.$$"
rm -rf "$stage"
mkdir "$stage"
trap 'rm -rf "$stage"' EXIT

status=0
dpcli release "$SPEC" --release-id "$DAY" \
  --output "$stage/table.csv" \
  --report "$stage/report.html" \
  --summary-md "$stage/summary.md" 2>&1 | log || status=$?
case "$status" in
  0)
    # the day's folder replaced whole: the previous one moved aside first, removed once the new one is in place
    old=""
    if [ -e "$OUT_DIR/$DAY" ]; then old="$OUT_DIR/.$DAY.old.$$"; rm -rf "$old"; mv "$OUT_DIR/$DAY" "$old"; fi
    mv "$stage" "$OUT_DIR/$DAY"
    if [ -n "$old" ]; then rm -rf "$old"; fi
    say "published $OUT_DIR/$DAY (release id $DAY)";;
  4) say "budget refused: the cap of this dataset is used up; nothing was spent" >&2;;
  5) say "ledger problem, or failed after the spend: read dpcli's message above (it names the paid record); nothing was published" >&2;;
  *) say "dpcli release failed (exit $status): read dpcli's message above; nothing was published" >&2;;
esac
exit "$status"
