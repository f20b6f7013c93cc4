#!/usr/bin/env bash
# The exactly-once torture of tool calls at full size: model failures of every kind injected
# between and inside tool steps over many turns, then `kill -9` at random moments, each followed by
# repair, verify and resume; prints the counts (tests/tools.rs,
# exactly_once_across_injected_failures_and_kill_9_rounds, runs a bounded form in the suite).
# Needs python3 for the MCP test server. About 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DSH_TOOL_TURNS="${DSH_TOOL_TURNS:-200}" DSH_TOOL_KILLS="${DSH_TOOL_KILLS:-200}" \
    cargo test -q --release -p dsh-e2e --test tests -- tools::exactly_once --nocapture 2>&1 | grep -E "tool torture|test result"
