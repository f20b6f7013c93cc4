#!/usr/bin/env bash
# Do dsh and DeepSeek Harness 0.2.1-rc.2 read and continue each other's session logs (format v4)?
# Runs the real reference, `deepseek-harness-runtime-bin` 0.2.1rc2 (one self-contained executable,
# with `deepseek-harness-sdk` 0.2.1rc2, both pinned below), with `--profile headless` against
# `dsh mock-server` as its OpenAI-compatible provider (through its pi-ai provider row: a
# `--patch` layer, see compat/v4_reference.py), in three parts:
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
#      unknown event type, header version 5, …): `dsh session verify`'s verdict beside the
#      reference's (continuing it), and the disagreements counted.
#
# Not part of the test suite: it needs the PyPI registry once, to install the reference into a
# cache venv; later runs use the cache only. Needs python3 (3.11) and zstd.
#
#   compat/v4-reference.sh                       # every case
#   compat/v4-reference.sh '1 tool' '2 plain'    # only the cases whose names start so ('3': mutants)
#   DSH=path/to/dsh DSH_COMPAT_CACHE=DIR DSH_V4_REFERENCE_OUT=DIR compat/v4-reference.sh
#
# DSH defaults to target/release/dsh, else target/debug/dsh (its plugin libraries beside it, as
# built or installed). The cache is ${DSH_COMPAT_CACHE:-$HOME/.cache/dsh-compat}/v4-reference; every
# command's output is kept in its runs/ folder, the reference-recorded logs (and the mutants) in
# DSH_V4_REFERENCE_OUT (default runs/reference-logs). Takes about four minutes (real retry waits).
# Prints PASS or FAIL per case, with the refusing side's message for a FAIL, the mutants' table and
# a closing count; exits 1 on any FAIL.
set -euo pipefail

RUNTIME_VERSION=0.2.1rc2 # deepseek-harness-runtime-bin and deepseek-harness-sdk, exact
requirements="
deepseek-harness-runtime-bin==$RUNTIME_VERSION
deepseek-harness-sdk==$RUNTIME_VERSION
annotated-types==0.8.0
pydantic==2.14.4
pydantic-core==2.50.5
typing-extensions==4.16.0
typing-inspection==0.4.5
"

cd "$(dirname "$0")/.."
repo=$PWD
. compat/find-dsh.sh
command -v zstd >/dev/null || { echo "zstd is missing: apt-get install zstd"; exit 1; }

cache=${DSH_COMPAT_CACHE:-$HOME/.cache/dsh-compat}/v4-reference
venv=$cache/venv
mkdir -p "$cache"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/compat-requirements.txt" 2>/dev/null)" != "$requirements" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    printf '%s\n' "$requirements" >"$cache/requirements.txt"
    "$venv/bin/pip" install --quiet -r "$cache/requirements.txt" >"$cache/pip.txt" 2>&1 \
        || { tail -20 "$cache/pip.txt"; echo "pip install failed (full output: $cache/pip.txt)"; exit 1; }
    printf '%s' "$requirements" >"$venv/compat-requirements.txt"
fi
# The executable's command line, as the package resolves it (one path, no extra arguments).
runtime=$("$venv/bin/python" -c 'import deepseek_harness_runtime as r
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
exec "$venv/bin/python" "$repo/compat/v4_reference.py" --dsh "$DSH" --runtime "$runtime" --work "$runs" \
    --out "$out" "$@"
