// Times the reference TypeScript retry invariant (@deepseek-ai/dsh-llm-retry/invariant) on one
// session log, for a side-by-side comparison with `dsh session verify`.
//
// usage: node benches/reference-invariant.mjs <folder with node_modules> <session.jsonl>
//
// The package only exports its Cordis plugin, so this drives it the way Cordis would: a stand-in
// context receives the registered validator, which then checks every record of the loaded session.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [folder, logPath] = process.argv.slice(2);
const require = createRequire(join(folder, "package.json"));
const invariant = await import(require.resolve("@deepseek-ai/dsh-llm-retry/invariant"));

const lines = readFileSync(logPath, "utf8").split("\n").filter((line) => line.length > 0);
const events = lines.slice(1).map((line) => JSON.parse(line));

let validator;
await invariant.apply({ invariants: { register: (_owner, install) => { validator = install; return () => {}; } } });

const violations = [];
const started = performance.now();
validator(
  { sessions: { list: () => [{ events }] }, on: () => () => {} },
  (message) => { violations.push(message); throw new Error(message); },
);
const seconds = (performance.now() - started) / 1000;
console.log(JSON.stringify({ events: events.length, violations: violations.length, seconds }));
