"""The driver of compat/v4-reference.sh (run that, not this): dsh and DeepSeek Harness 0.2.1-rc.2
reading and continuing each other's format-v4 session logs, against `dsh mock-server`.

    v4_reference.py --dsh DSH --runtime RT --work DIR --out DIR [--skip-mutants] [CASE_PREFIX ...]

Part 1: dsh writes a log for each scenario; the reference continues it (`--profile headless
--session-id ID "continue"`), then dsh verifies what the reference appended. Part 2: the reference
writes a log for each scenario; dsh verifies it, replays it and continues it (import, then `run
--session`); the logs are copied to --out. Part 3: one rule broken at a time in a reference log,
both readers' verdicts side by side. Part 4: the v0–v3 logs of tests/fixtures/v4/generations; the
reference continues each (migrating it; its migration worker is copied out of the executable for
the run, see place_worker), and the v4 log it publishes must be the suite's `<name>-v4.jsonl` and
the one dsh publishes when it continues the same log, byte for byte. One PASS/FAIL line per case;
exit 1 on any FAIL.
"""

import argparse
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

TIMEOUT = 180  # seconds any one command may take

# What the reference answers with in these runs: the mock's OpenAI route through its pi-ai
# provider plugin (its default route speaks Anthropic's protocol, which the mock does not), no
# title request (it would take a script step), and only a few tools, so headers stay small.
REF_TOOLS_OFF = ["tool-bash", "tool-jobs", "tool-fs-search", "tool-skill", "tool-subagent-control",
                 "tool-subagent-list-agents", "tool-subagent", "tool-subagent-fork", "tool-workflow",
                 "tool-todo", "tool-goal", "tool-web", "plan-mode"]

# A minimal MCP server over stdio for dsh's tool steps: `echo`, and `vanish`, which exits without
# answering the first time a call's key (dsh/idempotency-key) reaches it, and answers when the
# call comes again; the server says it deduplicates (dsh/idempotency), so dsh writes its own
# `tool/resolution` (ignorable) into the log the reference continues.
MCP_ECHO = r'''
import json, os, sys
TOOLS = [{"name": "echo", "description": "Answer the text", "inputSchema": {"type": "object",
          "properties": {"text": {"type": "string"}}, "required": ["text"]}},
         {"name": "vanish", "description": "Exit once, then answer", "inputSchema": {"type": "object"}}]
for line in sys.stdin:
    if not line.strip():
        continue
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, rid, result = msg.get("method"), msg["id"], None
    if method == "initialize":
        result = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}, "experimental": {"dsh/idempotency": {}}},
                  "serverInfo": {"name": "echo", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call" and msg["params"]["name"] == "vanish":
        key = msg["params"].get("_meta", {}).get("dsh/idempotency-key", "none")
        seen = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vanished-" + key)
        if not os.path.exists(seen):
            open(seen, "w").close()
            sys.exit(3)
        result = {"content": [{"type": "text", "text": "back"}], "isError": False}
    elif method == "tools/call":
        text = str(msg["params"].get("arguments", {}).get("text", ""))
        result = {"content": [{"type": "text", "text": "echo: " + text}], "isError": False}
    reply = {"jsonrpc": "2.0", "id": rid}
    if result is None:
        reply["error"] = {"code": -32601, "message": "no method " + str(method)}
    else:
        reply["result"] = result
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
'''


class Context:
    def __init__(self, args):
        self.dsh = os.path.abspath(args.dsh)
        self.rt = os.path.abspath(args.runtime)
        self.work = os.path.abspath(args.work)
        self.out = os.path.abspath(args.out)
        self.results = []  # (case, ok, detail)
        self.mocks = []
        self.only = args.cases
        self.mcp = os.path.join(self.work, "mcp_echo.py")
        with open(self.mcp, "w") as f:
            f.write(MCP_ECHO)

    def wanted(self, case):
        return not self.only or any(case.startswith(p) for p in self.only)

    def record(self, case, ok, detail=""):
        self.results.append((case, ok, detail))
        print(("PASS  " if ok else "FAIL  ") + case + ("" if ok else "\n      " + detail.replace("\n", "\n      ")),
              flush=True)

    # --- processes -------------------------------------------------------------------------------

    def dsh_env(self, home):
        env = {k: v for k, v in os.environ.items()
               if k not in ("DSH_PLUGIN_PATH", "DSH_LOG", "DSH_SESSIONS", "DSH_TELEMETRY_MODE")}
        env.update(DSH_HOME=home, NO_COLOR="1")
        return env

    def ref_env(self, home):
        env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
        env.update(DSH_HOME=home, DSH_TELEMETRY_MODE="DISABLED", MOCK_API_KEY="sk-mock", NO_COLOR="1")
        return env

    def run(self, argv, env, cwd, log_name):
        """Runs argv to its end; returns (exit code, stdout, stderr), both also kept in the work dir."""
        os.makedirs(cwd, exist_ok=True)
        try:
            p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                               stdin=subprocess.DEVNULL)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", e.stdout or "", (e.stderr or "") + f"\n(no end within {TIMEOUT}s)"
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
        with open(os.path.join(self.work, log_name + ".out"), "w") as f:
            f.write(out)
        with open(os.path.join(self.work, log_name + ".err"), "w") as f:
            f.write(err)
        return rc, out, err

    def dsh_cmd(self, home, cwd, args, log_name):
        return self.run([self.dsh] + args, self.dsh_env(home), cwd, log_name)

    def ref_cmd(self, home, cwd, patch, args, log_name):
        return self.run([self.rt, "--profile", "headless", "--patch", patch] + args, self.ref_env(home), cwd,
                        log_name)

    def mock(self, name, script):
        """Starts `dsh mock-server` on SCRIPT (YAML text); returns its base URL (…/v1)."""
        path = os.path.join(self.work, f"mock-{name}.yml")
        with open(path, "w") as f:
            f.write(script)
        p = subprocess.Popen([self.dsh, "mock-server", "--listen", "127.0.0.1:0", "--script", path, "--json",
                              "--record", os.path.join(self.work, f"mock-{name}-requests.jsonl")],
                             stdout=subprocess.PIPE, stderr=open(os.path.join(self.work, f"mock-{name}.err"), "w"),
                             text=True, env=self.dsh_env(os.path.join(self.work, "mock-home")))
        self.mocks.append(p)
        line = p.stdout.readline()
        try:
            return json.loads(line)["listening"].rstrip("/") + "/v1"
        except (ValueError, KeyError):
            raise SystemExit(f"dsh mock-server did not start: {line!r} (see {self.work}/mock-{name}.err)")

    def stop_mocks(self):
        for p in self.mocks:
            p.kill()
            p.wait()
        self.mocks = []

    # --- patch files -----------------------------------------------------------------------------

    def ref_patch(self, name, url, compression="zstd"):
        lines = [
            "- id: llm-pi-ai", "  config:", "    providers:", "      mock:", "        api: openai-completions",
            f"        baseURL: {url}", "        apiKeyEnv: MOCK_API_KEY", "        models:",
            "          - id: mock-model", "            contextWindow: 131072", "            maxTokens: 4096",
            "- id: agent-default-model", "  config:", "    provider: mock", "    model: mock-model",
            "- id: session-title-llm", "  disabled: true"]
        lines += [f"- id: {row}\n  disabled: true" for row in REF_TOOLS_OFF]
        if compression == "none":
            # A patch config replaces the entry's whole config, so the root is given again.
            lines += ["- id: session-persistence-jsonl", "  config:", "    root: !!js dshHomePath('sessions')",
                      "    compression: none"]
        path = os.path.join(self.work, f"ref-patch-{name}.yml")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def dsh_patch(self, name, url, tools=False):
        text = ("- insert:\n    - id: llm-mock-route\n      name: llm-openai\n"
                f"      config: {{provider: mock, baseUrl: \"{url}\", model: mock-model}}\n")
        if tools:
            text += ("    - id: echo\n      name: mcp\n"
                     f"      config: {{command: [{json.dumps(sys.executable)}, {json.dumps(self.mcp)}]}}\n")
        text += "- {id: agent, config: {provider: mock}}\n"
        path = os.path.join(self.work, f"dsh-patch-{name}.yml")
        with open(path, "w") as f:
            f.write(text)
        return path


# --- logs --------------------------------------------------------------------------------------------

def project_key(cwd):
    """The reference's project folder for a cwd (FORMAT.md §1)."""
    s = re.sub(r"[/\\:]+", "-", cwd).lstrip("-")
    s = "".join(c if re.match(r"[A-Za-z0-9._-]", c) else "".join(f"~{u:04X}" for u in
                                                                 _utf16(c)) for c in s)
    return "--" + s[:251] + "--"


def _utf16(c):
    b = c.encode("utf-16-be")
    return [int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2)]


def read_lines(path):
    if path.endswith(".zstd"):
        data = subprocess.run(["zstd", "-dcq", path], capture_output=True).stdout.decode()
    else:
        with open(path) as f:
            data = f.read()
    return [line for line in data.split("\n") if line.strip()]


def events(path):
    out = []
    for line in read_lines(path)[1:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def find_logs(root, name):
    found = []
    for d, _, files in os.walk(root):
        found += [os.path.join(d, f) for f in files if f == name]
    return sorted(found)


def last_turn_end(evs):
    ends = [e for e in evs if e.get("type") == "turn/end"]
    return ends[-1] if ends else None


def message_of(stderr):
    """The refusal or failure a command printed: its `dsh:` lines (else its last lines)."""
    lines = [line for line in stderr.strip().split("\n") if line.strip()]
    picked = [line for line in lines if line.startswith("dsh:") and "warning" not in line[:14]]
    return "\n".join(picked[-4:] or lines[-4:]) or "(nothing on stderr)"


def dsh_violations(out, err):
    lines = [line for line in (out + "\n" + err).split("\n") if line.strip()]
    return "\n".join(lines[:6]) or "(no output)"


# --- part 1: dsh writes, the reference continues -----------------------------------------------------

# Faults both sides record alike: name, mock script, prompt, exit code, extra.
BOTH_SCENARIOS = [
    ("plain", '- ok: "Hello from the mock."\n', "Say hello", 0, {}),
    ("503-then-success", '- status: 503\n- ok: "Recovered after a 503."\n', "Say hello", 0, {}),
    ("429-chain", "- {status: 429, headers: {retry-after: '1'}}\n- status: 429\n- status: 429\n"
                  '- ok: "Through after three 429s."\n', "Say hello", 0, {}),
]

DSH_SCENARIOS = BOTH_SCENARIOS + [
    # name, mock script, prompt, dsh's exit code, extra
    # The headless profile's llm-retry does not retry a cut stream (as rc.8's): the turn ends failed.
    ("truncated-stream", '- truncate: "partial answ"\n- ok: "Full answer after a cut stream."\n', "Say hello",
     1, {}),
    ("retries-exhausted", "- status: 500\n", "Say hello", 1, {}),
    ("tool-step", "- tool_calls: [{name: echo, arguments: {text: hi}}]\n- status: 503\n"
                  '- ok: "The tool said hi."\n', "Use the echo tool", 0, {"tools": True}),
    ("tool-resolved", "- tool_calls: [{name: vanish, arguments: {}}]\n"
                      '- ok: "Resolved by the key."\n', "Use the vanish tool", 0, {"tools": True}),
    ("tool-not-found", "- tool_calls: [{name: nosuch, arguments: {}}]\n"
                       '- ok: "No such tool, then."\n', "Use a tool", 0, {}),
    ("continued", '- ok: "First answer."\n- ok: "Second answer, same session."\n', "Say hello", 0,
     {"second": "And again"}),
    ("failover", None, "Say hello", 0, {"failover": True}),
    ("killed-repaired", '- status: 503\n- {ok: "never sent", hold: never}\n', "Say hello", None,
     {"kill": True}),
    ("imported", '- ok: "dsh continues the imported log."\n', "Go on in dsh", 0, {"import": True}),
]


def dsh_write(ctx, name, script, prompt, expect_rc, extra):
    """Runs the scenario in dsh; returns (home, cwd, session id, log path) or a failure message."""
    base = os.path.join(ctx.work, "p1", name)
    home, cwd = os.path.join(base, "dsh-home"), os.path.join(base, "cwd")
    os.makedirs(cwd, exist_ok=True)
    args = ["run"]
    if extra.get("failover"):
        primary = ctx.mock(f"p1-{name}-primary", "- status: 503\n")
        backup = ctx.mock(f"p1-{name}-backup", '- ok: "Answered by the backup route."\n')
        rc, out, err = ctx.dsh_cmd(home, cwd, ["plugin", "--profile", "fo", "add", "route-failover"],
                                   f"p1-{name}-plugin-add")
        if rc != 0:
            return f"dsh plugin add route-failover exited {rc}: {message_of(err)}"
        patch = os.path.join(ctx.work, f"dsh-patch-{name}.yml")
        with open(patch, "w") as f:
            f.write(f"""- id: llm-deepseek
  name: llm-openai
  config: {{provider: deepseek-official, baseUrl: "{primary}", model: primary-model}}
- insert:
    - id: llm-backup
      name: llm-openai
      config: {{provider: backup, baseUrl: "{backup}", model: backup-model}}
- id: route-failover
  config:
    routes: [deepseek-official, backup]
    codes: [SERVER]
    breaker: {{failures: 3, windowMs: 30000, cooldownMs: 30000}}
    store: memory
    onStoreError: open
""")
        args += ["--profile", "fo", "--patch", patch, prompt]
    else:
        url = ctx.mock(f"p1-{name}", script)
        args += ["--patch", ctx.dsh_patch(name, url, extra.get("tools")), prompt]

    if extra.get("import"):
        # A log the reference wrote, imported into dsh and continued by dsh.
        rhome = os.path.join(base, "ref-source-home")
        rurl = ctx.mock(f"p1-{name}-source", '- ok: "The reference wrote this turn."\n')
        rc, out, err = ctx.ref_cmd(rhome, cwd, ctx.ref_patch(f"p1-{name}-source", rurl), ["Say hello"],
                                   f"p1-{name}-ref-source")
        logs = find_logs(os.path.join(rhome, "sessions"), "session.v4.jsonl.zstd")
        if rc != 0 or not logs:
            return f"the reference did not write the source log (exit {rc}): {message_of(err)}"
        rc, out, err = ctx.dsh_cmd(home, cwd, ["session", "import", "--json", logs[0]], f"p1-{name}-import")
        if rc != 0:
            return f"dsh session import exited {rc}: {message_of(err)}"
        sid = json.loads(out)["session"]
        args = ["run", "--session", sid] + args[1:]

    if extra.get("kill"):
        p = subprocess.Popen([ctx.dsh] + args, env=ctx.dsh_env(home), cwd=cwd, stdin=subprocess.DEVNULL,
                             stdout=open(os.path.join(ctx.work, f"p1-{name}-dsh.out"), "w"),
                             stderr=open(os.path.join(ctx.work, f"p1-{name}-dsh.err"), "w"))
        deadline = time.time() + 30
        while time.time() < deadline:  # the second request is held: the retry has started
            logs = find_logs(os.path.join(home, "sessions"), "session.v4.jsonl")
            if logs and any(e["type"] == "llm/retry-started" for e in events(logs[0])):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGKILL)
        p.wait()
        logs = find_logs(os.path.join(home, "sessions"), "session.v4.jsonl")
        if not logs:
            return "dsh wrote no log before it was killed"
        sid = os.path.basename(os.path.dirname(logs[0]))
        rc, out, err = ctx.dsh_cmd(home, cwd, ["session", "repair", sid], f"p1-{name}-repair")
        if rc != 0:
            return f"dsh session repair exited {rc}: {message_of(err)}"
    else:
        rc, out, err = ctx.dsh_cmd(home, cwd, args, f"p1-{name}-dsh")
        if rc != expect_rc:
            return f"dsh run exited {rc}, expected {expect_rc}: {message_of(err)}"
        sid = [line for line in err.split("\n") if line.startswith("session ")][-1].split()[1]
        if extra.get("second"):
            rc, out, err = ctx.dsh_cmd(home, cwd, ["run", "--session", sid, extra["second"]], f"p1-{name}-dsh2")
            if rc != 0:
                return f"the second dsh run exited {rc}: {message_of(err)}"
    log = os.path.join(home, "sessions", sid, "session.v4.jsonl")
    if not os.path.exists(log):
        return f"dsh wrote no {log}"
    rc, out, err = ctx.dsh_cmd(home, cwd, ["session", "verify", log], f"p1-{name}-verify")
    if rc != 0:
        return f"dsh session verify of its own log exited {rc}: {dsh_violations(out, err)}"
    return home, cwd, sid, log


def ref_continue(ctx, case, home, cwd, sid, log, compression):
    """The reference continues session SID in HOME; returns (ok, detail, the log it appended to)."""
    url = ctx.mock(case, '- ok: "The reference continued this log."\n')
    before = read_lines(log)
    rc, out, err = ctx.ref_cmd(home, cwd, ctx.ref_patch(case, url, compression),
                               ["--session-id", sid, "continue"], case)
    if rc != 0:
        return False, f"the reference refused (exit {rc}): {message_of(err)}", log
    after = read_lines(log)
    if after[:len(before)] != before:
        return False, "the reference changed the lines dsh wrote (the log is not a prefix of its continuation)", log
    new = [json.loads(line) for line in after[len(before):]]
    end = last_turn_end(new)
    if not end or end["data"]["reason"].get("kind") != "completed" or new[-1]["type"] != "turn/end":
        return False, (f"the reference exited 0 but its turn did not end completed "
                       f"(last event {new[-1]['type'] if new else 'none'}: {json.dumps(end)[:300]})"), log
    if "The reference continued this log." not in out:
        return False, f"the reference's answer is not the mock's: {out.strip()[:200]!r}", log
    return True, "", log


def part1(ctx):
    print("== 1. DeepSeek Harness 0.2.1-rc.2 continues the logs dsh writes", flush=True)
    layout_done = False
    for name, script, prompt, expect_rc, extra in DSH_SCENARIOS:
        case = f"1 {name}"
        if not ctx.wanted(case):
            continue
        made = dsh_write(ctx, name, script, prompt, expect_rc, extra)
        if isinstance(made, str):
            ctx.record(f"{case}: dsh writes the log", False, made)
            ctx.stop_mocks()
            continue
        home, cwd, sid, log = made
        base = os.path.dirname(home)
        if not layout_done:
            # The home exactly as dsh lays it out (a copy, so the reference's profile stays out).
            copy_home = os.path.join(base, "ref-home-as-laid-out")
            shutil.copytree(home, copy_home)
            # 0.2.1-rc.2 keeps sessions under a project folder and refuses dsh's flat one (the README
            # says to move the folder): pinned here, so a reference that learns the layout shows up.
            ok, detail, _ = ref_continue(ctx, f"p1-{name}-as-laid-out", copy_home, cwd, sid,
                                         os.path.join(copy_home, "sessions", sid, "session.v4.jsonl"), "none")
            refused_flat = not ok and "unsupported flat-file layout" in detail
            ctx.record("1 layout: the reference refuses dsh's flat sessions/<id>/ layout with its own message",
                       refused_flat, detail or "the reference continued it: the README's advice is out of date")
            layout_done = True
        # The same log moved where the reference looks: sessions/<project key of cwd>/<id>/.
        relaid = os.path.join(base, "ref-home")
        shutil.copytree(home, relaid)
        header = json.loads(read_lines(log)[0])
        project = os.path.join(relaid, "sessions", project_key(header.get("cwd", cwd)))
        os.makedirs(project, exist_ok=True)
        os.rename(os.path.join(relaid, "sessions", sid), os.path.join(project, sid))
        rlog = os.path.join(project, sid, "session.v4.jsonl")
        ok, detail, _ = ref_continue(ctx, f"p1-{name}", relaid, header.get("cwd", cwd), sid, rlog, "none")
        ctx.record(f"{case}: the reference continues it (log moved into its project layout)", ok, detail)
        if ok:
            rc, out, err = ctx.dsh_cmd(home, cwd, ["session", "verify", rlog], f"p1-{name}-verify-after")
            ctx.record(f"{case}: dsh verifies the log after the reference's turn", rc == 0,
                       f"dsh session verify exited {rc}: {dsh_violations(out, err)}")
        ctx.stop_mocks()


# --- part 2: the reference writes, dsh reads and continues -------------------------------------------

REF_SCENARIOS = BOTH_SCENARIOS + [
    # name, mock script, task, the reference's exit code, extra
    ("truncated-stream", '- truncate: "partial answ"\n- ok: "Full answer after a cut stream."\n', "Say hello",
     0, {}),
    ("retries-exhausted", "- status: 500\n", "Say hello", 1, {}),
    ("tool-read", '- tool_calls: [{name: read, arguments: {file_path: "note.txt"}}]\n'
                  '- ok: "The note says: hi from note."\n', "Read note.txt", 0, {}),
    ("tool-error", '- tool_calls: [{name: read, arguments: {file_path: "missing.txt"}}]\n'
                   '- ok: "That file does not exist."\n', "Read missing.txt", 0, {}),
    ("tool-retry", '- tool_calls: [{name: read, arguments: {file_path: "note.txt"}}]\n- status: 503\n'
                   "- {status: 429, headers: {retry-after: '1'}}\n" '- ok: "Read it after two failures."\n',
     "Read note.txt", 0, {}),
    ("continued", '- ok: "First answer."\n- ok: "Second answer, same session."\n', "Say hello", 0,
     {"second": "And again"}),
    ("killed-in-retry-wait", '- status: 503\n- status: 503\n- status: 503\n- ok: "Answer after the crash."\n',
     "Say hello", None, {"kill": True}),
]


def ref_write(ctx, name, script, task, expect_rc, extra):
    """Records the scenario with the reference; returns [(fixture name, zstd log path)] or a message."""
    base = os.path.join(ctx.work, "p2", name)
    home, cwd = os.path.join(base, "ref-home"), os.path.join(base, "cwd")
    os.makedirs(cwd, exist_ok=True)
    with open(os.path.join(cwd, "note.txt"), "w") as f:
        f.write("hi from note\n")
    url = ctx.mock(f"p2-{name}", script)
    patch = ctx.ref_patch(f"p2-{name}", url)
    sessions = os.path.join(home, "sessions")
    if extra.get("kill"):
        p = subprocess.Popen([ctx.rt, "--profile", "headless", "--patch", patch, task], env=ctx.ref_env(home),
                             cwd=cwd, stdin=subprocess.DEVNULL,
                             stdout=open(os.path.join(ctx.work, f"p2-{name}.out"), "w"),
                             stderr=open(os.path.join(ctx.work, f"p2-{name}.err"), "w"))
        deadline, seen = time.time() + 60, False
        while time.time() < deadline and not seen:  # the second retry is durable: its ~1 s wait runs
            logs = find_logs(sessions, "session.v4.jsonl.zstd")
            seen = bool(logs) and any(e["type"] == "llm/retry" and e["data"].get("retry") == 2
                                      for e in events(logs[0]))
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if not seen:
            return "the reference's second llm/retry never became durable"
        log = find_logs(sessions, "session.v4.jsonl.zstd")[0]
        kept = os.path.join(base, "killed.jsonl.zstd")
        shutil.copyfile(log, kept)
        sid = json.loads(read_lines(log)[0])["id"]
        rc, out, err = ctx.ref_cmd(home, cwd, patch, ["--session-id", sid, "Please continue"], f"p2-{name}-2")
        if rc != 0:
            return f"the reference's own repair and continuation exited {rc}: {message_of(err)}"
        return [(f"{name}.before", kept), (f"{name}.repaired", log)]
    rc, out, err = ctx.ref_cmd(home, cwd, patch, [task], f"p2-{name}")
    if rc != expect_rc:
        return f"the reference exited {rc}, expected {expect_rc}: {message_of(err)}"
    logs = find_logs(sessions, "session.v4.jsonl.zstd")
    if len(logs) != 1:
        return f"expected one session.v4.jsonl.zstd under {sessions}, found {len(logs)}"
    result = []
    if extra.get("second"):
        kept = os.path.join(base, "turn1.jsonl.zstd")
        shutil.copyfile(logs[0], kept)
        result.append((f"{name}.turn1", kept))
        sid = json.loads(read_lines(logs[0])[0])["id"]
        rc, out, err = ctx.ref_cmd(home, cwd, patch, ["--session-id", sid, extra["second"]], f"p2-{name}-2")
        if rc != 0:
            return f"the reference's second turn exited {rc}: {message_of(err)}"
    result.append((name, logs[0]))
    return result


def expected_turns(evs):
    """Per turn, what the log itself says: requests made, retry waits, how the turn ended."""
    turns = {}
    for e in evs:
        d = e.get("data") or {}
        t = d.get("turn")
        if t is None:
            continue
        turn = turns.setdefault(t, {"attempts": 0, "waitsMs": [], "outcome": None})
        if e["type"] in ("assistant/attempt", "assistant/message"):
            turn["attempts"] += 1
        elif e["type"] == "llm/retry":
            turn["waitsMs"].append(d.get("delayMs"))
        elif e["type"] == "turn/end":
            turn["outcome"] = d["reason"].get("kind")
    return turns


def check_replay(ctx, fixture, path):
    rc, out, err = ctx.dsh_cmd(os.path.join(ctx.work, "p2-replay-home"), ctx.work,
                               ["session", "replay", "--json", path], f"p2-{fixture}-replay")
    if rc != 0:
        return False, f"dsh session replay exited {rc}: {message_of(err)}"
    rows = [json.loads(line) for line in out.split("\n") if line.strip().startswith("{")]
    replayed = [r for r in rows if "turn" in r]
    want = expected_turns(events(path))
    problems = []
    ended = {t: w for t, w in want.items() if w["outcome"] in ("completed", "error", "interrupted")}
    if sorted(r["turn"] for r in replayed) != sorted(ended):
        problems.append(f"replayed turns {[r['turn'] for r in replayed]}, the log has ended turns {sorted(ended)}")
    outcome_names = {"completed": "completed", "error": "failed", "interrupted": "aborted"}
    # A candidate that stops retrying "gave up" where the recorded turn "failed": the same end.
    same_end = {"gave-up": "failed"}
    for r in replayed:
        w = want.get(r["turn"])
        if not w:
            continue
        rec, cand = r["recorded"], r["candidate"]
        if rec["attempts"] != w["attempts"]:
            problems.append(f"turn {r['turn']}: recorded attempts {rec['attempts']}, the log has {w['attempts']}")
        if [round(x, 3) for x in rec["waitsMs"]] != [round(x, 3) for x in w["waitsMs"]]:
            problems.append(f"turn {r['turn']}: recorded waits {rec['waitsMs']}, the log has {w['waitsMs']}")
        if rec["outcome"] not in (w["outcome"], outcome_names.get(w["outcome"])):
            problems.append(f"turn {r['turn']}: recorded outcome {rec['outcome']!r}, the log's turn/end says "
                            f"{w['outcome']!r}")
        if (same_end.get(cand["outcome"], cand["outcome"]), cand["attempts"]) != (rec["outcome"], rec["attempts"]):
            problems.append(f"turn {r['turn']}: the replay under the same policy ends {cand['outcome']} after "
                            f"{cand['attempts']} attempts, the recording {rec['outcome']} after {rec['attempts']}")
    return not problems, "\n".join(problems)


def dsh_continue(ctx, fixture, path):
    home = os.path.join(ctx.work, "p2", "dsh-homes", fixture)
    cwd = os.path.join(home, "cwd")
    rc, out, err = ctx.dsh_cmd(home, cwd, ["session", "import", "--json", path], f"p2-{fixture}-import")
    if rc != 0:
        return False, f"dsh session import exited {rc}: {message_of(err)}"
    sid = json.loads(out)["session"]
    url = ctx.mock(f"p2-{fixture}-dsh", '- ok: "dsh continued the reference log."\n')
    rc, out, err = ctx.dsh_cmd(home, cwd, ["run", "--session", sid, "--patch", ctx.dsh_patch(fixture, url),
                                           "continue"], f"p2-{fixture}-dsh-run")
    if rc != 0:
        return False, f"dsh run --session exited {rc}: {message_of(err)}"
    if "dsh continued the reference log." not in out:
        return False, f"dsh's answer is not the mock's: {out.strip()[:200]!r}"
    logs = find_logs(os.path.join(home, "sessions"), "session.v4.jsonl") or \
        find_logs(os.path.join(home, "sessions"), "session.jsonl")
    evs = events(logs[0]) if logs else []
    end = last_turn_end(evs)
    if not evs or evs[-1]["type"] != "turn/end" or end["data"]["reason"].get("kind") != "completed":
        return False, f"dsh exited 0 but its log does not end with a completed turn ({logs})"
    rc, out, err = ctx.dsh_cmd(home, cwd, ["session", "verify", sid], f"p2-{fixture}-verify-after")
    if rc != 0:
        return False, f"dsh session verify of the continued log exited {rc}: {dsh_violations(out, err)}"
    return True, ""


def part2(ctx):
    print("== 2. dsh reads, verifies, replays and continues the logs 0.2.1-rc.2 writes", flush=True)
    os.makedirs(ctx.out, exist_ok=True)
    recorded = []
    for name, script, task, expect_rc, extra in REF_SCENARIOS:
        case = f"2 {name}"
        if not ctx.wanted(case):
            continue
        made = ref_write(ctx, name, script, task, expect_rc, extra)
        if isinstance(made, str):
            ctx.record(f"{case}: the reference records it", False, made)
            ctx.stop_mocks()
            continue
        for fixture, path in made:
            kept = os.path.join(ctx.out, fixture + ".jsonl.zstd")
            shutil.copyfile(path, kept)
            with open(os.path.join(ctx.out, fixture + ".jsonl"), "w") as f:
                f.write("\n".join(read_lines(path)) + "\n")
            recorded.append((fixture, script, task, expect_rc))
            label = f"2 {fixture}"
            failures = []
            for p in (kept, os.path.join(ctx.out, fixture + ".jsonl")):
                rc, out, err = ctx.dsh_cmd(ctx.work, ctx.work, ["session", "verify", p], f"p2-{fixture}-verify")
                if rc != 0:
                    failures.append(f"{os.path.basename(p)}: dsh session verify exited {rc}: "
                                    f"{dsh_violations(out, err)}")
            ctx.record(f"{label}: dsh session verify accepts it (.jsonl.zstd and .jsonl)", not failures,
                       "\n".join(failures))
            ok, detail = check_replay(ctx, fixture, kept)
            ctx.record(f"{label}: dsh session replay agrees with the recorded outcome", ok, detail)
            ok, detail = dsh_continue(ctx, fixture, kept)
            ctx.record(f"{label}: dsh continues it (session import, run --session, verify)", ok, detail)
        ctx.stop_mocks()
    with open(os.path.join(ctx.out, "RECORDED.md"), "w") as f:
        f.write("# Logs recorded by compat/v4-reference.sh\n\nDeepSeek Harness 0.2.1-rc.2 "
                "(`deepseek-harness-runtime-bin==0.2.1rc2`), `--profile headless`, against `dsh mock-server`; "
                "the patch is `ref-patch-*.yml` in the script's work folder. `.jsonl.zstd` files are "
                "byte for byte what the runtime wrote, `.jsonl` their decompressed copies.\n\n"
                "| fixture | mock script | task | exit |\n|---|---|---|---|\n")
        for fixture, script, task, rc in recorded:
            f.write(f"| `{fixture}` | `{script.strip().replace(chr(10), ' / ')}` | `{task}` | "
                    f"{'killed (-9), then continued' if rc is None else rc} |\n")
    return recorded


# --- part 3: mutants --------------------------------------------------------------------------------

def _shift(ev, at, by):
    """Moves every seq reference >= AT in EV by BY."""
    def m(s):
        return s + by if isinstance(s, int) and s >= at else s
    if isinstance(ev.get("seq"), int):
        ev["seq"] = m(ev["seq"])
    if "sourceEventSeqs" in ev:
        ev["sourceEventSeqs"] = [[m(x) for x in s] if isinstance(s, list) else m(s) for s in ev["sourceEventSeqs"]]
    op = ev.get("surfaceOp")
    if isinstance(op, dict):
        for k in ("startSeq", "endSeq"):
            if k in op:
                op[k] = m(op[k])
    d = ev.get("data")
    if isinstance(d, dict):
        if "messageSeqs" in d:
            d["messageSeqs"] = [m(x) for x in d["messageSeqs"]]
        if "headerSeq" in d:
            d["headerSeq"] = m(d["headerSeq"])


def insert_after(evs, index, new):
    """Inserts events NEW after evs[index], renumbering every later seq and reference."""
    at = evs[index]["seq"] + 1
    for e in evs:
        _shift(e, at, len(new))
    for k, e in enumerate(new):
        e["seq"] = at + k
    return evs[:index + 1] + new + evs[index + 1:]


def delete(evs, index):
    at = evs[index]["seq"]
    rest = evs[:index] + evs[index + 1:]
    for e in rest:
        _shift(e, at + 1, -1)
    return rest


def first(evs, pred):
    return next(i for i, e in enumerate(evs) if pred(e))


def mutants(header, evs):
    """(name, rule broken, header, events) — one rule broken at a time."""
    out = [("identity", "nothing (the control: both must accept)", header, evs)]
    ev = copy.deepcopy

    i = first(evs, lambda e: e["type"] == "tool/call")
    call = evs[i]
    extra_call = ev(call)
    extra_call["data"]["callId"] = "call-never-advertised"
    extra_call["time"] = call["time"]
    res_i = first(evs, lambda e: e["type"] == "tool/result")
    extra_res = ev(evs[res_i])
    extra_res["time"] = call["time"]
    msg = extra_res["data"]["message"]
    msg["toolCallId"], msg["source"]["callId"], msg["id"] = "call-never-advertised", "call-never-advertised", \
        "result-never-advertised"
    m = insert_after(ev(evs), i, [extra_call, extra_res])
    m[i + 2]["sourceEventSeqs"] = [m[i + 1]["seq"]]
    out.append(("tool-call-not-advertised", "a tool/call (with its result) whose callId no assistant message "
                "advertised", header, m))

    m = ev(evs)
    retries = [k for k, e in enumerate(m) if e["type"] == "llm/retry"]
    k = retries[1]
    m[k]["data"]["retry"] = 3
    started = first(m, lambda e: e["type"] == "llm/retry-started" and e["seq"] > m[k]["seq"])
    m[started]["data"]["retry"] = 3
    out.append(("retry-skips-a-number", "the second llm/retry (and its llm/retry-started) numbered 3: "
                "attempt 2 skipped", header, m))

    out.append(("step-end-unresolved-call", "the tool/result removed: step/end closes a step with an "
                "unanswered call", header, delete(ev(evs), res_i)))

    m = insert_after(ev(evs), len(evs) - 2, [{"type": "future/thing", "seq": 0, "time": evs[-2]["time"],
                                              "data": {}}])
    out.append(("unknown-type", "an event of unknown type future/thing, not ignorable", header, m))
    m = insert_after(ev(evs), len(evs) - 2, [{"type": "future/thing", "seq": 0, "time": evs[-2]["time"],
                                              "data": {}, "ignorable": True}])
    out.append(("unknown-type-ignorable", "the same with ignorable:true (the rule allows it: both must accept)",
                header, m))

    h = ev(header)
    h["version"] = 5
    out.append(("header-version-5", "header version 5 in session.v4.jsonl", h, evs))

    m = ev(evs)
    m[-1]["seq"] += 1
    out.append(("seq-gap", "the last event's seq one too high (a gap)", header, m))
    m = ev(evs)
    m[-1]["time"] = m[-2]["time"] - 1000
    out.append(("time-goes-back", "the last event a second before the one before it", header, m))
    m = ev(evs)
    m[-1]["time"] = m[-1]["time"] + 0.5
    out.append(("fractional-time", "a time of x.5 ms", header, m))
    h = ev(header)
    del h["isSeeded"]
    out.append(("header-no-isSeeded", "the header without isSeeded", h, evs))
    h = ev(header)
    h["sandboxMode"] = "workspace-write"
    out.append(("header-retired-field", "the header with the retired sandboxMode", h, evs))
    m = ev(evs)
    m[first(m, lambda e: e["type"] == "step/start")]["surfaceOp"] = "append"
    out.append(("surfaceop-on-step", "surfaceOp on a step/start (not a surface event)", header, m))
    m = ev(evs)
    j = first(m, lambda e: e["type"] == "assistant/message")
    m[j]["sourceEventSeqs"] = [m[j - 1]["seq"]]
    m[j] = {k: m[j][k] for k in ("type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp") if k in m[j]}
    out.append(("assistant-sourceEventSeqs", "an assistant/message with sourceEventSeqs", header, m))
    m = ev(evs)
    m[res_i]["sourceEventSeqs"] = [m[first(m, lambda e: e["type"] == "step/start")]["seq"]]
    out.append(("result-cites-wrong-seq", "a tool/result whose sourceEventSeqs cites a step/start", header, m))
    m = ev(evs)
    started = first(m, lambda e: e["type"] == "llm/retry-started")
    m[started]["data"]["retryId"] = "not-the-chain"
    out.append(("retry-started-other-chain", "an llm/retry-started whose retryId is not its llm/retry's",
                header, m))
    m = ev(evs)
    m[-1]["extra"] = 1
    out.append(("envelope-extra-key", "an unknown top-level key on an event", header, m))
    h = ev(header)
    h["isSeeded"] = True
    out.append(("seeded-without-marker", "the header isSeeded:true, no session/end-seed {inherited:true}", h, evs))
    m = insert_after(ev(evs), len(evs) - 1, [{"type": "session/end-seed", "seq": 0, "time": evs[-1]["time"],
                                              "data": {"inherited": True}}])
    out.append(("unseeded-with-marker", "a session/end-seed {inherited:true} in a log whose header is not "
                "seeded", header, m))
    return out


def part3(ctx, base_log):
    print("== 3. mutants: one rule broken at a time, both readers' verdicts", flush=True)
    lines = read_lines(base_log)
    header, evs = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    rows, disagreements = [], 0
    url = ctx.mock("p3", '- ok: "The reference accepted the mutant."\n')
    patch = ctx.ref_patch("p3", url, "none")
    for name, rule, h, m in mutants(header, evs):
        text = "\n".join(json.dumps(x, separators=(",", ":"), ensure_ascii=False) for x in [h] + m) + "\n"
        base = os.path.join(ctx.work, "p3", name)
        d = os.path.join(base, "ref-home", "sessions", project_key(header["cwd"]), header["id"])
        os.makedirs(d)
        with open(os.path.join(d, "session.v4.jsonl"), "w") as f:
            f.write(text)
        mutant = os.path.join(ctx.out, "mutants", name, "session.v4.jsonl")
        os.makedirs(os.path.dirname(mutant), exist_ok=True)
        with open(mutant, "w") as f:
            f.write(text)
        rc, out, err = ctx.dsh_cmd(base, base, ["session", "verify", mutant], f"p3-{name}-dsh")
        dsh_v = ("accept", "") if rc == 0 else ("refuse", dsh_violations(out, err).split("\n")[0])
        rc, out, err = ctx.ref_cmd(os.path.join(base, "ref-home"), header["cwd"], patch,
                                   ["--session-id", header["id"], "continue"], f"p3-{name}-ref")
        ref_v = ("accept", "") if rc == 0 else ("refuse", message_of(err).split("\n")[-1])
        agree = dsh_v[0] == ref_v[0]
        disagreements += not agree
        rows.append((name, rule, dsh_v, ref_v, agree))
    ctx.stop_mocks()
    print(f"{'mutant':28} {'dsh verify':10} {'0.2.1-rc.2':10}")
    for name, rule, dsh_v, ref_v, agree in rows:
        print(f"{name:28} {dsh_v[0]:10} {ref_v[0]:10} {'' if agree else 'DISAGREE'}")
        print(f"    rule broken: {rule}")
        if dsh_v[1]:
            print(f"    dsh:       {dsh_v[1]}")
        if ref_v[1]:
            print(f"    reference: {ref_v[1]}")
    for name, rule, dsh_v, ref_v, agree in rows:
        if name in ("identity", "unknown-type-ignorable"):
            ctx.record(f"3 {name}: both readers accept it", dsh_v[0] == ref_v[0] == "accept",
                       f"dsh {dsh_v[0]} {dsh_v[1]}; reference {ref_v[0]} {ref_v[1]}")
        else:
            ctx.record(f"3 {name}: both readers give the same verdict", agree,
                       f"dsh {dsh_v[0]}s ({dsh_v[1] or 'verify exit 0'}); the reference {ref_v[0]}s "
                       f"({ref_v[1] or 'continued it, exit 0'})")
    print(f"mutants: {len(rows)}, disagreements: {disagreements}", flush=True)


# --- part 4: older generations ------------------------------------------------------------------------

# The v0–v3 logs of tests/fixtures/v4/generations (made by its make.py), by name and generation.
GENERATIONS = [("generations", [0, 1, 2, 3]), ("compaction", [0, 1, 2, 3]), ("rate-limit", [1, 2, 3]),
               ("seeded", [0, 1, 2, 3]), ("extension", [3]), ("legacy", [0]), ("cut-stream", [0, 1])]
GENERATIONS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "tests", "fixtures", "v4", "generations")

# 0.2.1-rc.2 checks a migration in a worker thread it loads from this path on the real disk, where
# its executable does not put it (FORMAT.md §8): without it the reference migrates nothing.
WORKER_PACKAGE = "/snapshot/node/node_modules/@deepseek-ai/dsh-session-persistence-jsonl"


def place_worker(ctx):
    """Copies the migration worker out of the executable's own files to WORKER_PACKAGE (a patch's
    `!!js` value reads it there); returns the folder to remove afterwards, or None if it was there."""
    if os.path.exists(os.path.join(WORKER_PACKAGE, "lib", "worker.cjs")):
        return None
    out = os.path.join(ctx.work, "worker")
    os.makedirs(out, exist_ok=True)
    copy = ("(() => { const fs = process.getBuiltinModule('fs'); "
            f"const d = {json.dumps(WORKER_PACKAGE)}, o = {json.dumps(out)}; "
            "fs.writeFileSync(o + '/worker.cjs', fs.readFileSync(d + '/lib/worker.cjs')); "
            "fs.writeFileSync(o + '/package.json', fs.readFileSync(d + '/package.json')); "
            "return dshHomePath('sessions'); })()")
    patch = os.path.join(ctx.work, "ref-patch-worker.yml")
    with open(patch, "w") as f:
        f.write("- id: session-persistence-jsonl\n  config:\n"
                f"    root: !!js {json.dumps(copy)}\n    compression: none\n")
    ctx.ref_cmd(os.path.join(ctx.work, "worker-home"), ctx.work, patch, ["--session-id", "session-nope", "x"],
                "p4-worker")
    if not os.path.exists(os.path.join(out, "worker.cjs")):
        raise SystemExit(f"could not copy the migration worker out of {ctx.rt} (see {ctx.work}/p4-worker.err)")
    created = "/snapshot" if not os.path.exists("/snapshot") else None
    os.makedirs(os.path.join(WORKER_PACKAGE, "lib"), exist_ok=True)
    shutil.copyfile(os.path.join(out, "worker.cjs"), os.path.join(WORKER_PACKAGE, "lib", "worker.cjs"))
    shutil.copyfile(os.path.join(out, "package.json"), os.path.join(WORKER_PACKAGE, "package.json"))
    return created or WORKER_PACKAGE


def generation_file(generation):
    return "session.jsonl" if generation == 0 else f"session.v{generation}.jsonl"


def ref_migrates(ctx, case, source, generation):
    """The reference continues SOURCE placed as its generation's file; returns (lines of the v4 log it
    published before its session/end-seed, None) or (None, why not)."""
    with open(source) as f:
        original = f.read()
    header = json.loads(original.split("\n", 1)[0])
    cwd = header.get("cwd") or "/tmp/dshref-cwd"
    home = os.path.join(ctx.work, f"p4-{case}-ref")
    shutil.rmtree(home, ignore_errors=True)
    folder = os.path.join(home, "sessions", project_key(cwd), header["id"])
    os.makedirs(folder)
    placed = os.path.join(folder, generation_file(generation))
    with open(placed, "w") as f:
        f.write(original)
    url = ctx.mock(f"p4-{case}", '- ok: "The reference continued this log."\n')
    rc, out, err = ctx.ref_cmd(home, cwd, ctx.ref_patch(f"p4-{case}", url, "none"),
                               ["--session-id", header["id"], "continue"], f"p4-{case}-ref")
    if rc != 0:
        return None, f"the reference refused (exit {rc}): {message_of(err)}"
    with open(placed) as f:
        if f.read() != original:
            return None, "the reference changed the original log"
    v4 = os.path.join(folder, "session.v4.jsonl")
    if not os.path.exists(v4):
        return None, "the reference published no session.v4.jsonl"
    lines = read_lines(v4)
    seeds = [i for i, line in enumerate(lines) if json.loads(line).get("type") == "session/end-seed"]
    return lines[:seeds[-1]] if seeds else lines, None


def dsh_migrates(ctx, case, source, generation):
    """dsh continues SOURCE (v0: `session migrate` first, as dsh keeps writing v0 otherwise); returns
    (the lines of the v4 log it published, None) or (None, why not)."""
    with open(source) as f:
        original = f.read()
    header = json.loads(original.split("\n", 1)[0])
    home = os.path.join(ctx.work, f"p4-{case}-dsh")
    shutil.rmtree(home, ignore_errors=True)
    folder = os.path.join(home, "sessions", header["id"])
    os.makedirs(folder)
    placed = os.path.join(folder, generation_file(generation))
    with open(placed, "w") as f:
        f.write(original)
    if generation == 0:
        rc, out, err = ctx.dsh_cmd(home, ctx.work, ["session", "migrate", header["id"]], f"p4-{case}-dsh-migrate")
        if rc != 0:
            return None, f"dsh session migrate exited {rc}: {message_of(err)}"
    v4 = os.path.join(folder, "session.v4.jsonl")
    url = ctx.mock(f"p4-{case}-dsh", '- ok: "dsh continued this log."\n')
    rc, out, err = ctx.dsh_cmd(home, ctx.work, ["run", "--session", header["id"], "--patch",
                                                ctx.dsh_patch(f"p4-{case}", url), "continue"], f"p4-{case}-dsh")
    if rc != 0:
        return None, f"dsh run --session exited {rc}: {message_of(err)}"
    with open(placed) as f:
        if f.read() != original:
            return None, "dsh changed the original log"
    lines = read_lines(v4)
    rc, out, err = ctx.dsh_cmd(home, ctx.work, ["session", "verify", v4], f"p4-{case}-dsh-verify")
    if rc != 0:
        return None, f"dsh session verify of the continued log exited {rc}: {dsh_violations(out, err)}"
    seeds = [i for i, line in enumerate(lines) if json.loads(line).get("type") == "session/end-seed"]
    return (lines[:seeds[-1]] if seeds else lines), None


def part4(ctx):
    print("== 4. Older generations (v0–v3): 0.2.1-rc.2 migrates and continues them, and dsh's v4 is its",
          flush=True)
    placed = place_worker(ctx)
    try:
        for name, generations in GENERATIONS:
            for generation in generations:
                case = f"4 {name}-v{generation}"
                if not ctx.wanted(case):
                    continue
                source = os.path.join(GENERATIONS_DIR, f"{name}-v{generation}.jsonl")
                ref, why = ref_migrates(ctx, case.replace(" ", "-"), source, generation)
                if ref is None:
                    ctx.record(f"{case}: the reference migrates and continues it", False, why)
                    ctx.stop_mocks()
                    continue
                ctx.record(f"{case}: the reference migrates and continues it", True)
                kept = os.path.join(ctx.out, "generations", f"{name}-v4.jsonl")
                os.makedirs(os.path.dirname(kept), exist_ok=True)
                with open(kept, "w") as f:
                    f.write("".join(line + "\n" for line in ref))
                with open(os.path.join(GENERATIONS_DIR, f"{name}-v4.jsonl")) as f:
                    fixture = f.read()
                ctx.record(f"{case}: it is the suite's {name}-v4.jsonl, byte for byte",
                           fixture == "".join(line + "\n" for line in ref),
                           f"the reference's is kept in {kept}; the suite's differs")
                ours, why = dsh_migrates(ctx, case.replace(" ", "-"), source, generation)
                ctx.stop_mocks()
                if ours is None:
                    ctx.record(f"{case}: dsh migrates and continues it", False, why)
                    continue
                differs = next((i for i, (a, b) in enumerate(zip(ref, ours)) if a != b), None)
                if differs is None and len(ours) != len(ref):
                    differs = min(len(ours), len(ref))
                detail = "" if differs is None else (f"line {differs + 1} differs:\n  reference: "
                                                     f"{(ref + [''])[differs][:300]}\n  dsh:       "
                                                     f"{(ours + [''])[differs][:300]}")
                ctx.record(f"{case}: dsh's v4 log is the reference's, byte for byte", differs is None, detail)
    finally:
        if placed:
            shutil.rmtree(placed, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsh", required=True)
    ap.add_argument("--runtime", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-mutants", action="store_true")
    ap.add_argument("cases", nargs="*", help="only the cases whose names start so (e.g. '1 plain', '2', '3')")
    args = ap.parse_args()
    ctx = Context(args)
    try:
        if any(ctx.wanted(f"1 {s[0]}") for s in DSH_SCENARIOS):
            part1(ctx)
        if any(ctx.wanted(f"2 {s[0]}") for s in REF_SCENARIOS) or ctx.wanted("3"):
            if not ctx.wanted("2") and ctx.only:  # part 3 alone still needs its base log
                ctx.only.append("2 tool-retry")
            part2(ctx)
        base = os.path.join(ctx.out, "tool-retry.jsonl")
        if ctx.wanted("3") and not args.skip_mutants:
            if os.path.exists(base):
                part3(ctx, base)
            else:
                ctx.record("3 mutants", False, f"no base log {base}: the reference did not record tool-retry")
        if any(ctx.wanted(f"4 {name}-v{g}") for name, generations in GENERATIONS for g in generations):
            part4(ctx)
    finally:
        ctx.stop_mocks()
    passed = sum(1 for _, ok, _ in ctx.results if ok)
    failed = len(ctx.results) - passed
    print(f"\n{passed} passed, {failed} failed")
    if failed:
        print("failed cases:")
        for case, ok, detail in ctx.results:
            if not ok:
                print(f"  {case}\n      {detail.splitlines()[0] if detail else ''}")
    print(f"reference-recorded logs (for tests/fixtures/v4/): {ctx.out}")
    print(f"every command's stdout and stderr: {ctx.work}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
