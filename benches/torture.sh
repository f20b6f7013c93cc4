#!/usr/bin/env bash
# The long form of the crash-torture test: kill -9 dsh at random moments ROUNDS times (default
# 1000; CI runs 12), checking after each that no acknowledged event was lost, the log repairs and
# verifies, and no continuation is enqueued twice.
set -euo pipefail
cd "$(dirname "$0")/.."
DSH_TORTURE_ROUNDS="${ROUNDS:-1000}" cargo test --release -p dsh-e2e -- --exact torture::kill_9_at_random_moments_loses_no_committed_event --nocapture
