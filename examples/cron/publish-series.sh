#!/usr/bin/env bash
# Publish one period of a DP series a day from cron (issue 26; docs/how-to-series.md): yesterday's table from an
# event log, its sidecar, an HTML report drawing the series so far, and a Markdown summary.
#
#   # crontab -e: every day at 02:15 UTC, the day that just ended
#   15 2 * * *  cd /srv/stats && PATH=/srv/stats/.venv/bin:/usr/bin:/bin DPCLI_LEDGER=/srv/stats/ledger.jsonl examples/cron/publish-series.sh >>/srv/stats/dpcli-series.log 2>&1
#
# cron runs the line with /bin/sh, PATH=/usr/bin:/bin and hardly anything else: the line itself puts the venv that
# holds dpcli first on PATH (/srv/stats/.venv here: README.md, Install, says how to make it) and names the ledger.
# Once, before the first run, the operator sets the dataset's cap (a person decides it, not the job):
#   /srv/stats/.venv/bin/dpcli budget set admissions --epsilon 3 --ledger /srv/stats/ledger.jsonl
#
# The spec (configs/series.yaml) declares the series: 365 daily periods from 2026-01-01, each row in the day its
# own `admitted` field names. Its `input:` may be the whole event log or the day's rows: dpcli reads only the rows of
# the period it releases. The release id is the day (UTC, GNU date), and dpcli derives the period from it (period 1 =
# the series' start). The FIRST period released charges the series' whole budget once; every later day spends
# nothing. A day that has not ended yet is refused (exit 2: rows may still arrive), and so is a day past the horizon
# (exit 2: start the next series with a new spec `name:` and `start:`, a new charge). A re-run of a day returns that
# day's frozen table and spends nothing. The day's files are made in a hidden folder beside it and take the dated
# folder's place only when the release and its report succeeded: a refused or failed run leaves no folder.
# Every line of the log starts with the time (UTC); dpcli's own lines say which period it released and what it spent.
set -euo pipefail

SPEC="${SPEC:-configs/series.yaml}"                # the series' spec (its `input:` names the event log)
OUT_DIR="${OUT_DIR:-published-series}"             # where the day's folder goes
DAY="${DAY:-$(date -u -d yesterday +%F)}"          # the day to publish (the one that just ended): the release id

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
dpcli release "$SPEC" --release-id "$DAY" --output "$stage/table.csv" 2>&1 | log || status=$?
if [ "$status" -eq 0 ]; then
  # the report reads the earlier days' published values from the ledger's frozen tables (never the input)
  dpcli report "$stage/table.csv" --output "$stage/report.html" --summary-md "$stage/summary.md" 2>&1 | log \
    || status=$?
  if [ "$status" -ne 0 ]; then
    say "the day's table was released but its report failed (exit $status): run this script again for $DAY (it spends nothing)" >&2
    exit "$status"
  fi
fi
case "$status" in
  0)
    # the day's folder replaced whole: the previous one moved aside first, removed once the new one is in place
    old=""
    if [ -e "$OUT_DIR/$DAY" ]; then old="$OUT_DIR/.$DAY.old.$$"; rm -rf "$old"; mv "$OUT_DIR/$DAY" "$old"; fi
    mv "$stage" "$OUT_DIR/$DAY"
    if [ -n "$old" ]; then rm -rf "$old"; fi
    say "published $OUT_DIR/$DAY (release id $DAY)";;
  2) say "refused (a day not ended yet, past the series' horizon, or a spec problem): read dpcli's message above; nothing was spent" >&2;;
  4) say "budget refused: the cap cannot take the series' charge; nothing was spent" >&2;;
  5) say "ledger problem, or failed after the spend: read dpcli's message above (it names the paid record); nothing was published" >&2;;
  *) say "dpcli release failed (exit $status): read dpcli's message above; nothing was published" >&2;;
esac
exit "$status"
