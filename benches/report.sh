#!/usr/bin/env bash
# Measures every row of the speed table (spec 95-quality-targets) and writes the medians into the
# "Performance" section of README.md, between its performance:begin/end markers. Runs the Rust
# benchmarks of dsh-e2e and benches/verify.sh (which installs the reference TypeScript invariant
# from the npm registry for the side-by-side timing). Takes about ten minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for bench in waterfall plugin_load commands runtime; do
  echo "== cargo bench --bench $bench" >&2
  cargo bench -q -p dsh-e2e --bench "$bench" > "$out/$bench.txt"
done
echo "== benches/verify.sh" >&2
bash benches/verify.sh > "$out/verify.txt"

rows() { grep -E '^\| ' "$1" | grep -vE '^\| (what|events) |^\|---' || true; }
{
  echo "<!-- performance:begin (written by benches/report.sh on $(date -u +%Y-%m-%d), $(nproc) cores) -->"
  echo "| what | target | measured (median) |"
  echo "|---|---|---|"
  for bench in waterfall plugin_load commands runtime verify; do rows "$out/$bench.txt"; done
  echo
  sed -n '/^### /,/^$/p' "$out/verify.txt"
  echo "<!-- performance:end -->"
} > "$out/section.md"

python3 - "$out/section.md" <<'PY'
import re, sys
section = open(sys.argv[1]).read().rstrip("\n")
readme = open("README.md").read()
pattern = re.compile(r"<!-- performance:begin.*?<!-- performance:end -->", re.S)
if not pattern.search(readme):
    sys.exit("README.md has no performance:begin/end markers")
open("README.md", "w").write(pattern.sub(lambda _: section, readme))
PY
echo "README.md updated" >&2
