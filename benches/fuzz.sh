#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (FUZZ_SECONDS each, default 60) from its
# committed seed corpus; what the fuzzer finds is kept in fuzz/target/corpus, not in git. Works
# on the stable toolchain (no sanitizer). A crash stops the script and leaves the input in
# fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
seconds=${FUZZ_SECONDS:-60}
for target in $(cargo fuzz list); do
  work="target/corpus/$target"
  mkdir -p "$work"
  echo "== $target: ${seconds}s"
  cargo fuzz run -s none "$target" "$work" "corpus/$target" -- -max_total_time="$seconds" -max_len=65536 2>&1 |
    grep -E "^Done|panicked|SUMMARY|crash-" || true
  if compgen -G "artifacts/$target/crash-*" >/dev/null; then
    echo "$target crashed: see fuzz/artifacts/$target" >&2
    exit 1
  fi
done
