#!/usr/bin/env bash
# Do dsh and DeepSeek Harness 0.2.1-rc.2 read and continue each other's session logs (format v4)?
# Runs the real reference, `deepseek-harness-runtime-bin` 0.2.1rc2 (one self-contained executable,
# with `deepseek-harness-sdk` 0.2.1rc2, both pinned in tests/fixtures/sdk/requirements.txt, the
# pins the suite's SDK tests install too), with `--profile headless` against
# `dsh mock-server` as its OpenAI-compatible provider (through its pi-ai provider row: a
# `--patch` layer, see compat/v4_reference.py), in four parts:
#
#   1  dsh writes a log per scenario — plain, a 503 then success, a 429 chain, a cut stream,
#      retries exhausted, a tool step (MCP) with a retry, a tool call resolved by its key after its server exited, an unknown tool, two turns, a failover
#      hop (route-failover), `kill -9` mid-request then `dsh session repair`, an imported reference
#      log continued by dsh — and the reference continues it (`--session-id ID "continue"`) in a
#      copy of the home: it must end its turn completed and keep dsh's lines as they are. Then
#      `dsh session verify` must accept what the reference appended. The home exactly as dsh lays
#      it out is tried once; the scenarios run with the log moved into the reference's own layout
#      (sessions/<project key of cwd>/<id>/session.v4.jsonl, its compression `none`).
#   2  the reference writes a log per scenario — the same faults, a `read` tool step (found and
#      not found), a tool step with retries, two turns in two processes, `kill -9` in a retry
#      wait and its own repair — and dsh must verify it (exit 0, the .jsonl.zstd and its .jsonl),
#      replay it (`session replay`: the recorded attempts, waits and outcome are the log's, and the
#      same policy replays to the same end) and continue it (`session import`, `run --session`,
#      then `verify`). The logs are copied into the output folder, as fixtures are kept.
#   3  mutants of the reference's tool-and-retry log, one rule broken at a time (a tool/call no
#      message advertised, an llm/retry skipping a number, a step/end with an unanswered call, an
#      unknown event type, header version 5, a fork without its inherited marker, …): `dsh
#      session verify`'s verdict beside the reference's (continuing it), and the disagreements
#      counted.
#   4  the older generations of tests/fixtures/v4/generations (v0–v3 logs: a tool step and a
#      changed system prompt, the same with a compaction, the rc.8 reference's packed retries, a
#      fork, a v3 log with an extension's block, members and event, a log of 0.1's early shapes):
#      the reference continues each (its write-open migrates it and publishes session.v4.jsonl
#      beside it), dsh continues each, and the two v4 logs' migrated heads must be equal byte
#      for byte.
#
# Not part of the test suite: it needs the PyPI registry once, to install the reference into the
# SDK tests' cache venv (tests/fixtures/sdk/install-sdk.sh); later runs use the cache only. Needs
# python3 (3.11) and zstd. Part 4 copies the reference's migration worker to /snapshot while it
# runs (see compat/v4_reference.py, place_worker), so it runs as root.
#
#   compat/v4-reference.sh                       # every case
#   compat/v4-reference.sh '1 tool' '2 plain'    # only the cases whose names start so ('3': mutants)
#   DSH=path/to/dsh DSH_COMPAT_CACHE=DIR DSH_V4_REFERENCE_OUT=DIR compat/v4-reference.sh
#
# DSH defaults to this tree's target/debug/dsh, built first (compat/find-dsh.sh); it may name any
# dsh with its plugin libraries beside it. The work folder is ${DSH_COMPAT_CACHE:-$HOME/.cache/dsh-compat}/v4-reference; every
# command's output is kept in its runs/ folder, the reference-recorded logs (and the mutants) in
# DSH_V4_REFERENCE_OUT (default runs/reference-logs). Takes about four minutes (real retry waits).
# Prints PASS or FAIL per case, with the refusing side's message for a FAIL, the mutants' table and
# a closing count; exits 1 on any FAIL.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD
. compat/find-dsh.sh
command -v zstd >/dev/null || { echo "zstd is missing: apt-get install zstd"; exit 1; }

cache=${DSH_COMPAT_CACHE:-$HOME/.cache/dsh-compat}/v4-reference
mkdir -p "$cache"
# The SDK's installer: the pinned runtime in a cached venv (the suite's SDK tests use the same one).
python=$(bash tests/fixtures/sdk/install-sdk.sh)
# The executable's command line, as the package resolves it (one path, no extra arguments).
runtime=$("$python" -c 'import deepseek_harness_runtime as r
args = r.resolve_bundled_launch_args()
assert len(args) == 1, args
print(args[0])')
[ -x "$runtime" ] || { echo "the reference runtime $runtime is not executable"; exit 1; }

runs=$cache/runs
rm -rf "$runs"
mkdir -p "$runs"
out=${DSH_V4_REFERENCE_OUT:-$runs/reference-logs}
rm -rf "$out"
echo "dsh: $DSH ($("$DSH" --version))"
echo "reference: DeepSeek Harness $("$runtime" --version 2>/dev/null || echo "?") ($runtime)"
exec "$python" "$repo/compat/v4_reference.py" --dsh "$DSH" --runtime "$runtime" --work "$runs" \
    --out "$out" "$@"
