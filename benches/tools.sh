#!/usr/bin/env bash
# The exactly-once tortures of tool calls at full size (the suite runs bounded forms):
#
# - tests/tools.rs, exactly_once_across_injected_failures_and_kill_9_rounds: model failures of
#   every kind injected between and inside tool steps over many turns, then `kill -9` at random
#   moments, each followed by repair, verify and resume, against a server that cooperates with
#   nothing (DSH_TOOL_TURNS, DSH_TOOL_KILLS);
# - tests/tool_effects.rs, exactly_once_with_cooperating_servers_across_kill_9_in_the_effect_window:
#   rounds of four model failures around a step calling a deduplicating ledger, a read-only tool,
#   a task over HTTP and the non-cooperating server, dsh killed in the armed server's moment
#   between its durable effect and dsh's durable result (three rounds in four) or once the calls
#   are durable, then resumed and verified (DSH_EFFECT_ROUNDS).
#
# Prints the counts of each. Needs python3 and node (the MCP test servers). About 35 minutes on 2
# cores; `benches/tools.sh effects` runs only the second.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-all}" != effects ]; then
    DSH_TOOL_TURNS="${DSH_TOOL_TURNS:-200}" DSH_TOOL_KILLS="${DSH_TOOL_KILLS:-200}" \
        cargo test -q --release -p dsh-e2e --test tests -- tools::exactly_once --nocapture 2>&1 |
        grep -E "tool torture|test result"
fi
DSH_EFFECT_ROUNDS="${DSH_EFFECT_ROUNDS:-250}" \
    cargo test -q --release -p dsh-e2e --test tests -- tool_effects::exactly_once --nocapture 2>&1 |
    grep -E "effects torture|test result|panicked"
