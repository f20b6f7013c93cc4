#!/usr/bin/env bash
# Measures `dsh web` (release build): append-to-browser latency with 1 and 100 watchers, 50
# sessions through one server beside 50 `dsh run` processes, memory per idle session, and the
# Trajectory of 1k/10k/100k-event sessions in headless Chromium (Debian's chromium and
# chromium-driver). Prints the README's tables; DSH_BENCH_WEB=latency,fleet,idle,trajectory picks
# parts.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -q -p dsh-e2e --bench web
