#!/usr/bin/env bash
# Does dsh notice a LiteLLM proxy between it and the provider? Starts `dsh mock-server` as an
# OpenAI-compatible provider, LiteLLM's proxy 1.110.2 in front of it (the `litellm` package with
# its proxy's dependencies listed one by one below, every version pinned: `litellm[proxy]` needs
# `litellm-proxy`, which the registry lacks), and runs `dsh run` through the proxy twice per
# proxy config: once against an upstream that fails five times and then answers, once against one
# that always fails. The proxy runs with its default retries, then with `num_retries: 0` under
# litellm_settings. Each run must print the gateway warning (`answers through a LiteLLM proxy
# (x-litellm-* headers)`) exactly once. The script also shows, with curl, the x-litellm-* headers
# the proxy sends on a success, on a success it retried for and on an error (whether
# x-litellm-attempted-retries is among them), and how many requests reached the mock in each
# case. Takes about three minutes (dsh's and LiteLLM's own backoff).
# Not part of the test suite: it needs the PyPI registry once, to fill its scratch folder.
#
#   compat/litellm.sh            # scratch in ${TMPDIR:-/tmp}/dsh-compat/litellm
#   DSH_COMPAT_SCRATCH=DIR compat/litellm.sh
#
# Uses the dsh already built at target/debug/dsh. Prints a summary; exits 1 when a run missed the
# warning (or printed it more than once) or ended otherwise than expected.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=${DSH_COMPAT_SCRATCH:-${TMPDIR:-/tmp}/dsh-compat}/litellm
mkdir -p "$scratch"
dsh=$PWD/target/debug/dsh
[ -x "$dsh" ] || { echo "no $dsh: build dsh first (cargo build)"; exit 1; }

# litellm and what its proxy needs to start (each missing one is a ModuleNotFoundError at
# startup), then everything those pull in, as resolved on CPython 3.11.
requirements="
litellm==1.110.2
apscheduler==3.11.3
backoff==2.2.1
cryptography==50.0.2
expression==5.8.0
fastapi==0.165.0
fastapi-sso==0.23.0
mcp==2.3.0
orjson==3.13.0
pyjwt==2.15.1
python-multipart==0.0.34
rq==2.12.0
semver==3.1.2
soundfile==0.14.0
starlette==1.10.0
uvicorn==0.55.0
uvloop==0.23.0
websockets==15.0.1

aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
attrs==26.1.0
boto3==1.44.8
botocore==1.44.8
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
croniter==7.0.0
dnspython==2.9.2
email-validator==2.4.0
fastuuid==0.14.0
filelock==4.3.2
frozenlist==1.8.0
fsspec==2026.9.0
h11==0.16.0
h2==4.4.1
hf-xet==1.8.0
hpack==4.2.0
httpcore==1.0.9
httpcore2==2.16.2
httpx==0.29.0
httpx2==2.16.2
huggingface-hub==2.4.0
hyperframe==6.1.0
idna==3.20
importlib-metadata==8.9.0
jinja2==3.1.6
jiter==0.19.0
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
markupsafe==3.0.4
mcp-types==2.3.0
multidict==7.2.1
numpy==2.4.6
oauthlib==4.0.1
openai==3.60.0
opentelemetry-api==1.45.2
packaging==26.4
propcache==0.5.4
pycparser==3.12
pydantic==2.14.4
pydantic-core==2.50.5
pydantic-settings==2.16.3
python-dateutil==2.9.0.post0
python-dotenv==1.2.4
pyyaml==6.0.4
redis==8.1.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rpds-py==2026.9.1
s3transfer==0.19.3
six==1.17.0
sniffio==1.3.1
sse-starlette==3.7.1
tiktoken==0.14.0
tokenizers==0.23.3
tqdm==4.70.1
truststore==0.10.5
typing-extensions==4.16.0
typing-inspection==0.4.5
tzlocal==5.4.5
urllib3==2.8.0
yarl==1.25.1
zipp==4.1.2
"
venv=$scratch/venv
if [ ! -x "$venv/bin/litellm" ] || [ "$(cat "$venv/compat-requirements.txt" 2>/dev/null)" != "$requirements" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    printf '%s\n' "$requirements" >"$scratch/requirements.txt"
    "$venv/bin/pip" install --quiet -r "$scratch/requirements.txt" >"$scratch/pip.txt" 2>&1 \
        || { tail -20 "$scratch/pip.txt"; echo "pip install failed (full output: $scratch/pip.txt)"; exit 1; }
    printf '%s' "$requirements" >"$venv/compat-requirements.txt"
fi
python=$venv/bin/python

runs=$scratch/runs
rm -rf "$runs"
mkdir -p "$runs"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# start_mock DIR NAME SCRIPT: serves SCRIPT, recording every request; sets $mock_url (…/v1).
start_mock() {
    local dir=$1 name=$2
    printf '%s\n' "$3" >"$dir/$name.yml"
    "$dsh" mock-server --listen 127.0.0.1:0 --script "$dir/$name.yml" --record "$dir/$name-requests.jsonl" -v \
        >"$dir/$name.out" 2>"$dir/$name.err" &
    local pid=$! address=""
    pids+=("$pid")
    for _ in $(seq 100); do
        address=$(sed -n 's/^listening on //p' "$dir/$name.out")
        [ -n "$address" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$address" ] || { cat "$dir/$name.err"; echo "mock-server $name did not start"; exit 1; }
    mock_url=$address/v1
}

# The requests a mock's record holds: `posts` (chat completions) or `gets` (anything else).
count() {
    "$python" -c '
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
posts = sum(1 for r in lines if r["method"] == "POST" and r["path"].endswith("/chat/completions"))
print(posts if sys.argv[2] == "posts" else len(lines) - posts)' "$1" "$2" 2>/dev/null || echo 0
}

# start_proxy DIR: the proxy on a free port with DIR/config.yaml, polled until ready; sets $proxy.
start_proxy() {
    local dir=$1 port pid
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # LITELLM_LOCAL_MODEL_COST_MAP: the bundled price list, not a download at every start.
    LITELLM_LOCAL_MODEL_COST_MAP=True NO_COLOR=1 "$venv/bin/litellm" --config "$dir/config.yaml" \
        --host 127.0.0.1 --port "$port" >"$dir/proxy.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    proxy=http://127.0.0.1:$port
    for _ in $(seq 600); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' "$proxy/health/readiness")" = 200 ]; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    tail -30 "$dir/proxy.log"
    echo "the LiteLLM proxy did not become ready (log: $dir/proxy.log)"
    exit 1
}

# Waits (a few seconds at most) for the GET /v1/models that LiteLLM sends each deployment while
# starting (mock-server answers it 404 and records it, taking no step of its script), so the
# counts below are dsh's requests alone.
await_discovery() {
    for _ in $(seq 50); do
        [ "$(count "$1" gets)" -ge 1 ] && return 0
        sleep 0.1
    done
}

master_key=sk-dsh-compat-master
warning='answers through a LiteLLM proxy (x-litellm-\* headers)'
failed=0
summary=()

# dsh_run DIR NAME MODEL EXPECTED_EXIT RECORD ROUND: one `dsh run` through the proxy.
dsh_run() {
    local dir=$1 name=$2 model=$3 expected=$4 record=$5 round=$6
    local home=$dir/home-$name rc=0 before after warnings attempts
    mkdir -p "$home"
    cat >"$dir/$name-patch.yml" <<EOF
- id: llm-deepseek
  name: llm-openai
  config:
    provider: deepseek-official
    baseUrl: $proxy/v1
    model: $model
    apiKeyEnv: DEEPSEEK_API_KEY
EOF
    before=$(count "$record" posts)
    (cd "$home" && env -u DSH_PLUGIN_PATH -u DSH_LOG -u DSH_SESSIONS DSH_HOME="$home" NO_COLOR=1 \
        DEEPSEEK_API_KEY=$master_key "$dsh" run --patch "$dir/$name-patch.yml" "Say hi") \
        >"$dir/$name.stdout" 2>"$dir/$name.stderr" || rc=$?
    after=$(count "$record" posts)
    warnings=$(grep -c "$warning" "$dir/$name.stderr" || true)
    # What dsh saw on each attempt, from its session log.
    attempts=$("$python" -c '
import glob, json, sys
seen = []
for log in glob.glob(sys.argv[1] + "/sessions/*/session.jsonl"):
    for line in open(log):
        event = json.loads(line)
        if event.get("type") == "assistant/attempt":
            failure = event["data"].get("failure")
            seen.append(failure["code"] if failure else "ok")
print(" ".join(seen) or "none")' "$home" 2>/dev/null || echo "?")
    local verdict=ok
    if [ "$warnings" != 1 ]; then verdict="WARNING PRINTED $warnings TIMES"; failed=1; fi
    if [ "$rc" != "$expected" ]; then verdict="$verdict; EXIT $rc, EXPECTED $expected"; failed=1; fi
    summary+=("$(printf '%-16s %-6s exit %-2s warnings %-2s upstream requests %-3s failed attempts: %s  [%s]' \
        "$round" "$name" "$rc" "$warnings" "$((after - before))" "$attempts" "$verdict")")
    echo "  dsh run against $model: exit $rc, $((after - before)) upstream requests, failed attempts: $attempts"
    grep "$warning" "$dir/$name.stderr" | sed 's/^/    /' || true
}

# show_headers DIR NAME MODEL ROUND: a streamed request through the proxy, its x-litellm-* headers.
show_headers() {
    local dir=$1 name=$2 model=$3 status
    status=$(curl -s -o "$dir/$name-body.txt" -D "$dir/$name-headers.txt" -w '%{http_code}' "$proxy/v1/chat/completions" \
        -H "authorization: Bearer $master_key" -H 'content-type: application/json' \
        -d "{\"model\": \"$model\", \"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}")
    echo "  curl against $model: HTTP $status ($(count "$dir/$model-requests.jsonl" posts) upstream requests so far), x-litellm-* headers:"
    tr -d '\r' <"$dir/$name-headers.txt" | grep -i '^x-litellm-' | sed 's/^/    /' || echo "    (none)"
    if grep -qi '^x-litellm-attempted-retries:' "$dir/$name-headers.txt"; then
        summary+=("$(printf '%-16s %-6s curl HTTP %s: %s' "$4" "$name" "$status" \
            "$(tr -d '\r' <"$dir/$name-headers.txt" | grep -i '^x-litellm-attempted-retries:')")")
    else
        summary+=("$(printf '%-16s %-6s curl HTTP %s: no x-litellm-attempted-retries' "$4" "$name" "$status")")
    fi
}

# round DIR LABEL LITELLM_SETTINGS: fresh mocks and a fresh proxy, then the runs and the curls.
round() {
    local dir=$runs/$1 round=$2 settings=$3
    mkdir -p "$dir"
    echo "== proxy with $round"
    start_mock "$dir" flaky "- status: 503
- status: 503
- status: 503
- status: 503
- status: 503
- ok: hello through the proxy"
    local flaky=$mock_url
    start_mock "$dir" down "- status: 503"
    local down=$mock_url
    # For curl alone: one failure the proxy may retry, then answers.
    start_mock "$dir" blip "- status: 503
- status: 503
- ok: hello after one failure"
    local blip=$mock_url
    # allowed_openai_params: the deepseek-official route sends `thinking`, which LiteLLM refuses
    # for an openai/ model (HTTP 400 UnsupportedParamsError) unless let through.
    cat >"$dir/config.yaml" <<EOF
model_list:
  - model_name: flaky
    litellm_params:
      model: openai/flaky
      api_base: $flaky
      api_key: sk-upstream
      allowed_openai_params: [thinking]
  - model_name: down
    litellm_params:
      model: openai/down
      api_base: $down
      api_key: sk-upstream
      allowed_openai_params: [thinking]
  - model_name: blip
    litellm_params:
      model: openai/blip
      api_base: $blip
      api_key: sk-upstream
      allowed_openai_params: [thinking]
general_settings:
  master_key: $master_key
$settings
EOF
    start_proxy "$dir"
    await_discovery "$dir/flaky-requests.jsonl"
    await_discovery "$dir/down-requests.jsonl"
    await_discovery "$dir/blip-requests.jsonl"
    dsh_run "$dir" flaky flaky 0 "$dir/flaky-requests.jsonl" "$round"
    dsh_run "$dir" down down 1 "$dir/down-requests.jsonl" "$round"
    show_headers "$dir" ok flaky "$round"
    show_headers "$dir" blip blip "$round"
    show_headers "$dir" error down "$round"
}

round default "default retries" ""
round no-retries "num_retries: 0" "litellm_settings:
  num_retries: 0"

echo
echo "== summary (LiteLLM proxy 1.110.2; details in $runs)"
printf '%s\n' "${summary[@]}"
if [ "$failed" = 1 ]; then
    echo "FAILED: a run missed the LiteLLM warning, repeated it or ended unexpectedly"
    exit 1
fi
echo "every run printed the LiteLLM warning exactly once"
