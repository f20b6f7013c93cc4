#!/usr/bin/env bash
# The long form of the crash-torture tests: kill -9 dsh at random moments ROUNDS times (default
# 1000 on files, 300 on PostgreSQL across two homes; CI runs 12 of each), checking after each that
# no acknowledged event was lost, the log repairs and verifies, and no continuation is enqueued
# twice.
set -euo pipefail
cd "$(dirname "$0")/.."
DSH_TORTURE_ROUNDS="${ROUNDS:-1000}" cargo test --release -p dsh-e2e -- --exact torture::kill_9_at_random_moments_loses_no_committed_event --nocapture
DSH_TORTURE_ROUNDS="${PG_ROUNDS:-300}" cargo test --release -p dsh-e2e -- --exact torture::kill_9_across_two_homes_on_postgres_loses_no_committed_event_and_sends_no_continuation_twice --nocapture
