"""The kill schedule of dsh's effects torture against a side-effecting step run as a Temporal
activity and as a DBOS step (benches/effects-side-by-side.sh sets it up and prints the table).

Each round runs one workflow whose single step appends `round-N` to a ledger file (fsynced).
Three rounds in four, the step waits, once its effect is durable, on a FIFO the driver opens,
and the driver kills the worker process with SIGKILL right then — between "effect done" and
"result durable" — and starts a new one; the fourth round, the kill lands before the effect.
The system then finishes the workflow its own way (Temporal retries the activity once its
start-to-close timeout passes; DBOS recovers the pending workflow when a process launches), and
the driver counts the ledger's lines per round: every line beyond one is a duplicate effect.

  python effects_side_by_side.py temporal ADDRESS ROUNDS WORKDIR
  python effects_side_by_side.py dbos DATABASE_URL ROUNDS WORKDIR
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

SIGNAL_TIMEOUT = 120


def effect(ledger, hold, line):
    """The step's side effect, with the driver's hold before or after it."""
    armed = os.path.join(hold, "armed")
    when = None
    try:
        with open(armed) as file:
            when = file.read().strip()
        os.unlink(armed)
    except FileNotFoundError:
        pass
    if when == "before":
        wait_for_kill(hold, line)
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{line}\n".encode())
    os.fsync(fd)
    os.close(fd)
    if when == "after":
        wait_for_kill(hold, line)
    return f"appended {line}"


def wait_for_kill(hold, line):
    with open(os.path.join(hold, "signal"), "w") as fifo:
        fifo.write(f"held {line}\n")
    with open(os.path.join(hold, "release")) as fifo:
        fifo.read()


def signalled(hold):
    """Waits for the held step's signal (the step's process is then killed, not released)."""
    got = []
    reader = threading.Thread(target=lambda: got.append(open(os.path.join(hold, "signal")).read()), daemon=True)
    reader.start()
    reader.join(SIGNAL_TIMEOUT)
    if not got:
        raise SystemExit("the step never signalled")


def arm(hold, round_number):
    with open(os.path.join(hold, "armed"), "w") as file:
        file.write("after" if round_number % 4 < 3 else "before")


def make_hold(workdir):
    hold = os.path.join(workdir, "hold")
    os.makedirs(hold, exist_ok=True)
    for fifo in ("signal", "release"):
        path = os.path.join(hold, fifo)
        if not os.path.exists(path):
            os.mkfifo(path)
    return hold


def duplicates(ledger, rounds):
    lines = open(ledger).read().split() if os.path.exists(ledger) else []
    per_round = [lines.count(f"round-{n}") for n in range(rounds)]
    missing = sum(1 for n in per_round if n == 0)
    return sum(max(0, n - 1) for n in per_round), missing


def kill(process):
    process.send_signal(signal.SIGKILL)
    process.wait()


# --- Temporal ---------------------------------------------------------------------------------

@activity.defn(name="append")
def temporal_append(line: str) -> str:
    return effect(os.environ["LEDGER"], os.environ["HOLD"], line)


@workflow.defn(name="OneStep")
class OneStep:
    @workflow.run
    async def run(self, line: str) -> str:
        return await workflow.execute_activity(
            "append",
            line,
            start_to_close_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        )


async def temporal_worker(address):
    from concurrent.futures import ThreadPoolExecutor
    from temporalio.client import Client
    from temporalio.worker import Worker
    from temporalio.worker import UnsandboxedWorkflowRunner

    client = await Client.connect(address)
    worker = Worker(
        client,
        task_queue="effects",
        workflows=[OneStep],
        activities=[temporal_append],
        activity_executor=ThreadPoolExecutor(4),
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    print("worker ready", flush=True)
    await worker.run()


async def temporal_driver(address, rounds, workdir):
    from temporalio.client import Client

    hold, ledger = make_hold(workdir), os.path.join(workdir, "temporal.ledger")
    env = dict(os.environ, LEDGER=ledger, HOLD=hold)
    start = lambda: subprocess.Popen([sys.executable, __file__, "temporal-worker", address], env=env)
    client = await Client.connect(address)
    worker = start()
    for number in range(rounds):
        arm(hold, number)
        handle = await client.start_workflow("OneStep", f"round-{number}", id=f"round-{number}-{os.getpid()}", task_queue="effects")
        await asyncio.get_running_loop().run_in_executor(None, signalled, hold)
        kill(worker)
        worker = start()
        await asyncio.wait_for(handle.result(), SIGNAL_TIMEOUT)
    kill(worker)
    return duplicates(ledger, rounds)


# --- DBOS -------------------------------------------------------------------------------------

def dbos_round(url, number, start):
    """One process: launches DBOS (which recovers a pending workflow), starts round `number`'s
    workflow when `start`, and waits for its result."""
    from dbos import DBOS, SetWorkflowID

    DBOS(config={"name": "effects", "system_database_url": url, "log_level": "ERROR"})

    @DBOS.step()
    def append(line):
        return effect(os.environ["LEDGER"], os.environ["HOLD"], line)

    @DBOS.workflow()
    def one_step(line):
        return append(line)

    DBOS.launch()
    workflow_id = f"round-{number}"
    if start:
        with SetWorkflowID(workflow_id):
            handle = DBOS.start_workflow(one_step, workflow_id)
    else:
        handle = DBOS.retrieve_workflow(workflow_id)
    print(handle.get_result(), flush=True)
    DBOS.destroy()


def dbos_driver(url, rounds, workdir):
    hold, ledger = make_hold(workdir), os.path.join(workdir, "dbos.ledger")
    env = dict(os.environ, LEDGER=ledger, HOLD=hold)
    for number in range(rounds):
        arm(hold, number)
        first = subprocess.Popen([sys.executable, __file__, "dbos-round", url, str(number), "start"], env=env)
        signalled(hold)
        kill(first)
        recovered = subprocess.run([sys.executable, __file__, "dbos-round", url, str(number), "recover"], env=env, timeout=SIGNAL_TIMEOUT)
        if recovered.returncode != 0:
            raise SystemExit(f"round {number}: the recovering process failed")
    return duplicates(ledger, rounds)


def main():
    mode = sys.argv[1]
    if mode == "temporal-worker":
        asyncio.run(temporal_worker(sys.argv[2]))
    elif mode == "dbos-round":
        dbos_round(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "start")
    else:
        target, rounds, workdir = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        if mode == "temporal":
            found = asyncio.run(temporal_driver(target, rounds, workdir))
        else:
            found = dbos_driver(target, rounds, workdir)
        window = sum(1 for n in range(rounds) if n % 4 < 3)
        print(json.dumps({"system": mode, "rounds": rounds, "kills": rounds, "inWindow": window,
                          "duplicates": found[0], "missing": found[1]}))


if __name__ == "__main__":
    main()
