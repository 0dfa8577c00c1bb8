#!/usr/bin/env bash
# Publish one DP release a day from cron: the noisy table, its sidecar, an HTML report and a Markdown summary.
#
#   # crontab -e: every day at 02:15, the day's snapshot
#   15 2 * * *  cd /srv/stats && DPCLI_LEDGER=/srv/stats/ledger.jsonl examples/cron/publish-release.sh >>/var/log/dpcli.log 2>&1
#
# Once, before the first run, the operator sets the dataset's cap (a person decides it, not the job):
#   dpcli budget set adult --epsilon 10 --ledger /srv/stats/ledger.jsonl
#
# The release id is the snapshot's date, so a cron job that runs twice in a day (a retry, a manual run) writes the
# paid table again and spends nothing. When the cap is used up, dpcli exits 4 and nothing is spent or written.
set -euo pipefail

SPEC="${SPEC:-examples/release.yaml}"        # the release spec (its `input:` names the day's file)
OUT_DIR="${OUT_DIR:-published}"              # where the day's files go
DAY="${DAY:-$(date -u +%F)}"                 # the snapshot's date: the release id
: "${DPCLI_LEDGER:?set DPCLI_LEDGER to the ledger file or postgresql:// URL}"
export DPCLI_LEDGER

mkdir -p "$OUT_DIR/$DAY"
status=0
dpcli release "$SPEC" --release-id "$DAY" --quiet \
  --output "$OUT_DIR/$DAY/table.csv" \
  --report "$OUT_DIR/$DAY/report.html" \
  --summary-md "$OUT_DIR/$DAY/summary.md" || status=$?
case "$status" in
  0) echo "published $OUT_DIR/$DAY (release id $DAY)";;
  4) echo "budget refused: the cap of this dataset is used up; nothing was spent" >&2;;
  5) echo "ledger problem, or failed after the spend: read dpcli's message above (it names the paid record)" >&2;;
  *) echo "dpcli release failed (exit $status); nothing was spent" >&2;;
esac
exit "$status"
