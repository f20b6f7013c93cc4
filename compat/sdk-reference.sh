#!/usr/bin/env bash
# Does a program written for DeepSeek Harness's Python SDK see the same on dsh as on the real
# 0.2.1-rc.2 runtime? For each scenario — plain, a 503 then success, a 503/429 chain, a cut
# stream, two turns on one session — the same SDK program (deepseek-harness-sdk 0.2.1rc2) runs
# against `dsh --profile sdk` and against deepseek-harness-runtime-bin 0.2.1rc2, each routed to a
# `dsh mock-server` with the same script, and what the SDK returned (answer, finish_reason) and the
# notifications it read (methods, event types and statuses, in order; ids, times and texts aside)
# are compared. Prints PASS or FAIL per scenario (a FAIL shows both sequences); exits 1 on any.
#
# Not part of the test suite: it installs the pinned reference into the cache venv
# compat/v4-reference.sh uses (the PyPI registry once; later runs use the cache only).
#
#   compat/sdk-reference.sh                  # every scenario
#   compat/sdk-reference.sh plain 'two'      # only those whose names start so
#   DSH=path/to/dsh DSH_COMPAT_CACHE=DIR compat/sdk-reference.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. compat/find-dsh.sh
cache=${DSH_COMPAT_CACHE:-$HOME/.cache/dsh-compat}
DSH_E2E_SDK_CACHE=$cache/v4-reference-sdk python=$(bash tests/fixtures/sdk/install-sdk.sh)
runtime=$("$python" -c 'import deepseek_harness_runtime as r
args = r.resolve_bundled_launch_args()
assert len(args) == 1, args
print(args[0])')
work=$cache/sdk-reference/runs
rm -rf "$work"
mkdir -p "$work"
echo "dsh: $DSH ($("$DSH" --version))"
echo "reference: $runtime"
exec "$python" "$repo/compat/sdk_reference.py" --dsh "$DSH" --runtime "$runtime" --work "$work" "$@"
