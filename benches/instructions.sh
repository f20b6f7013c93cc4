#!/usr/bin/env bash
# Counts the instructions of one waterfall decision of the shipped chain (dsh-retry, relay-retry, a
# fixture, llm-retry) under callgrind: a figure the VM's timing noise does not move, for comparing
# two builds of the hot path. Prints one Markdown row, as the other benches do. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "benches/instructions.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
decisions=${DECISIONS:-1000}
bench=$(cargo bench -q -p dsh-e2e --bench waterfall --no-run --message-format=json |
  python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
profile=$(mktemp)
trap 'rm -f "$profile"' EXIT
DSH_BENCH_DECISIONS=$decisions valgrind -q --tool=callgrind --callgrind-out-file="$profile" \
  --toggle-collect='waterfall::decide_once' "$bench"
total=$(awk '/^(summary|totals):/ {print $2; exit}' "$profile")
echo "| instructions per waterfall decision, shipped chain (callgrind, $decisions decisions) | — | $((total / decisions)) |"
