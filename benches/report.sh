#!/usr/bin/env bash
# Measures every row of the speed table (spec 95-quality-targets) and writes the medians into the
# "Performance" section of README.md, between its performance:begin/end markers. Runs the Rust
# benchmarks of dsh-e2e and benches/verify.sh (which installs the reference TypeScript invariant
# from the npm registry for the side-by-side timing), and the retry-storm table (`storm`, which
# needs redis-server), the session stores side by side (`stores`, which starts PostgreSQL), and the
# instructions of one waterfall decision (benches/instructions.sh, which needs valgrind).
# Takes about forty minutes on 2 cores.
# The raw outputs stay in target/bench-report/; `--compose-only` rewrites the README from them.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-report
mkdir -p "$out"

if [ "${1:-}" != "--compose-only" ]; then
  for bench in waterfall plugin_load commands runtime storm stores; do
    echo "== cargo bench --bench $bench" >&2
    cargo bench -q -p dsh-e2e --bench "$bench" > "$out/$bench.txt"
  done
  echo "== benches/verify.sh" >&2
  bash benches/verify.sh > "$out/verify.txt"
  echo "== benches/instructions.sh" >&2
  bash benches/instructions.sh > "$out/instructions.txt"
fi

python3 - "$out" "$(date -u +%Y-%m-%d)" "$(nproc)" <<'PY'
import re, sys
out, day, cores = sys.argv[1:]
def cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]
rows, extra = [], []
for bench in ["waterfall", "instructions", "plugin_load", "commands", "runtime", "verify"]:
    lines = open(f"{out}/{bench}.txt").read().splitlines()
    for line in lines:
        if line.startswith("| ") and len(cells(line)) == 3 and cells(line)[0] != "what":
            rows.append(line)
    if bench == "verify":
        start = next((i for i, l in enumerate(lines) if l.startswith("### ")), None)
        if start is not None:
            end = next(i for i, l in enumerate(lines[start:], start) if l.startswith("| ") and len(cells(l)) == 3)
            extra = [l for l in lines[start:end]]
            while extra and not extra[-1].strip():
                extra.pop()
def section_of(bench):
    kept = [l for l in open(f"{out}/{bench}.txt").read().splitlines() if l.startswith("### ") or l.startswith("|") or not l.strip()]
    while kept and not kept[-1].strip():
        kept.pop()
    return kept
extra = extra + [""] + section_of("storm") + [""] + section_of("stores")
section = "\n".join(
    [f"<!-- performance:begin (written by benches/report.sh on {day}, {cores} cores) -->",
     "| what | target | measured (median) |", "|---|---|---|"] + rows + [""] + extra + ["<!-- performance:end -->"])
readme = open("README.md").read()
pattern = re.compile(r"<!-- performance:begin.*?<!-- performance:end -->", re.S)
if not pattern.search(readme):
    sys.exit("README.md has no performance:begin/end markers")
open("README.md", "w").write(pattern.sub(lambda _: section, readme))
PY
echo "README.md updated" >&2
