#!/usr/bin/env bash
# Measures `dsh session verify` on generated logs (10^4 to 2·10^6 events) and compares it with the
# reference TypeScript invariant on the 100,000-event log. Installs the reference package from the
# npm registry into benches/out/reference first.
set -euo pipefail
cd "$(dirname "$0")/.."
reference=benches/out/reference
if [ ! -d "$reference/node_modules/@deepseek-ai/dsh-llm-retry" ]; then
  mkdir -p "$reference"
  (cd "$reference" && echo '{"name":"dsh-reference","private":true}' > package.json &&
    npm install --silent --no-audit --no-fund @deepseek-ai/dsh-llm-retry@0.1.0-rc.8)
fi
DSH_REFERENCE_INVARIANT="$PWD/$reference" cargo bench -p dsh-e2e --bench verify_logs
