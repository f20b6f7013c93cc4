// Loads session logs with DeepSeek Harness's own JSONL persistence backend
// (@deepseek-ai/dsh-session-persistence-jsonl) and reports which it refuses.
//
//   node load-with-reference.mjs NODE_MODULES LOG...
//
// NODE_MODULES is a folder where the reference packages are installed; each LOG is a
// session.jsonl. Every log is copied into a scratch root at the path the backend expects, then
// loaded the way the reference resumes a session (validation, repair in memory, seeding a
// session store). Prints one line per refused log and a summary; exits 1 when any was refused.
import { createRequire } from 'node:module';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, ...logs] = process.argv.slice(2);
if (modules === undefined) {
  console.error('usage: node load-with-reference.mjs NODE_MODULES LOG...');
  process.exit(2);
}
const persistenceDir = realpathSync(join(modules, '@deepseek-ai/dsh-session-persistence-jsonl'));
const requireBeside = createRequire(join(persistenceDir, 'package.json'));
const load = async (name) => import(pathToFileURL(requireBeside.resolve(name)).href);

const { Context } = await load('@deepseek-ai/cordis');
const { SessionStore } = await load('@deepseek-ai/dsh-session');
const { JsonlSessionPersistence } = await load('@deepseek-ai/dsh-session-persistence-jsonl');

const root = mkdtempSync(join(tmpdir(), 'dsh-reference-root-'));
const ctx = new Context();
ctx.plugin(SessionStore);
ctx.plugin(JsonlSessionPersistence, { root, compression: 'none' });
await new Promise((resolve) => ctx.inject(['sessionPersistence'], (inner) => resolve(inner)));
const persistence = ctx.sessionPersistence;

let accepted = 0;
const refused = [];
for (const log of logs) {
  try {
    const header = JSON.parse(readFileSync(log, 'utf8').split('\n', 1)[0]);
    const meta = { id: header.id, cwd: header.cwd, createdAt: header.createdAt, version: header.version };
    const target = persistence.locate(meta).path;
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(log, target);
    const loaded = await persistence.load(header.id);
    if (loaded === undefined) throw new Error('not found after copying');
    accepted += 1;
  } catch (error) {
    refused.push([log, error instanceof Error ? error.message : String(error)]);
  }
}
for (const [log, message] of refused) console.log(`refused ${log}: ${message}`);
console.log(`the reference loader accepted ${accepted} of ${logs.length} logs`);
await ctx.registry.dispose?.();
process.exit(refused.length === 0 ? 0 : 1);
