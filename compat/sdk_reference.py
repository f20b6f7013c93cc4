"""Does a program written for the DeepSeek Harness Python SDK see the same thing on dsh as on the
real 0.2.1-rc.2 runtime? Runs one SDK program per scenario against each runtime, both routed to a
`dsh mock-server` serving the same script, and compares what the SDK returned (answer,
finish_reason) and the notifications it read: methods, event types and statuses in order (ids,
times and texts aside). Driven by compat/sdk-reference.sh; reuses v4_reference.py's processes."""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import v4_reference  # noqa: E402

from deepseek_harness import DeepSeekHarness  # noqa: E402

# name, mock script, prompts, the known difference (None: the two must agree)
SCENARIOS = [
    ("plain", '- ok: "Hello from the mock."\n', ["Say hello"], None),
    ("503 then success", '- status: 503\n- ok: "recovered"\n', ["Say hello"], None),
    ("503, 429, success", '- status: 503\n- status: 429\n- ok: "recovered"\n', ["Say hello"], None),
    ("cut stream", '- truncate: "partial answ"\n- ok: "whole"\n', ["Say hello"],
     "dsh-base's llm-retry keeps rc.8's rule and does not retry a cut stream; 0.2.1-rc.2 retries it"),
    ("two turns", '- ok: "one"\n- ok: "two"\n', ["first", "second"], None),
]

# What each side writes that the other has no part for, left out of the comparison: the
# reference's runtime-context snapshot (a user/message not from the user), its context-window
# note and its session title; dsh's system prompt, written as an empty surface head at the
# step's start and then replaced by the prompt (the reference writes the prompt at once), and
# dsh's ignorable llm/first-token (the reference keeps that time in the message's stream).
REFERENCE_ONLY = {"request/context", "session/title"}
DSH_ONLY = {"llm/first-token"}


def carried(notification):
    """Whether the notification is one both runtimes have a part for (see REFERENCE_ONLY, DSH_ONLY)."""
    if notification.method != "session.event":
        return True
    event = notification.payload["event"]
    data = event.get("data") or {}
    if event["type"] in REFERENCE_ONLY | DSH_ONLY:
        return False
    if event["type"] == "user/message" and (data.get("source") or {}).get("kind") != "user":
        return False
    replaces_head = isinstance(event.get("surfaceOp"), dict) and event["type"] == "system/message"
    return not replaces_head


def shape(notification):
    payload = notification.payload
    if notification.method == "session.event":
        return payload["event"]["type"]
    if notification.method == "session.status":
        return "status:" + str(payload.get("status"))
    return notification.method


def drive(bin_path, profile, patch, home, cwd, provider, model, prompts):
    os.makedirs(cwd, exist_ok=True)
    sdk = DeepSeekHarness(dsh_bin=bin_path, profile=profile, patches=(patch,), dsh_home=home, cwd=cwd,
                          provider=provider, model=model,
                          env={"MOCK_API_KEY": "sk-mock", "DSH_TELEMETRY_MODE": "DISABLED", "NO_COLOR": "1"})
    runs = []
    with sdk:
        session = sdk.start_session()
        for prompt in prompts:
            result = session.run(prompt)
            runs.append({"answer": result.final_response, "finish": result.finish_reason,
                         "notifications": [shape(n) for n in result.notifications if carried(n)]})
    return runs


def compare(name, dsh_runs, ref_runs):
    lines = []
    for index, (ours, theirs) in enumerate(zip(dsh_runs, ref_runs)):
        for key in ("answer", "finish"):
            if ours[key] != theirs[key]:
                lines.append(f"run {index + 1} {key}: dsh {ours[key]!r}, reference {theirs[key]!r}")
        if ours["notifications"] != theirs["notifications"]:
            lines.append(f"run {index + 1} notifications:\n  dsh       {' '.join(ours['notifications'])}\n"
                         f"  reference {' '.join(theirs['notifications'])}")
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsh", required=True)
    parser.add_argument("--runtime", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    args.out = os.path.join(args.work, "unused")
    ctx = v4_reference.Context(args)
    failed = 0
    known = 0
    for name, script, prompts, difference in SCENARIOS:
        if not ctx.wanted(name):
            continue
        case = os.path.join(ctx.work, name.replace(" ", "-").replace(",", ""))
        shutil.rmtree(case, ignore_errors=True)
        url = ctx.mock("dsh-" + os.path.basename(case), script)
        dsh_patch = ctx.dsh_patch(os.path.basename(case), url)
        ours = drive(ctx.dsh, "sdk", dsh_patch, case + "/dsh-home", case + "/cwd", "mock", "mock-model", prompts)
        url = ctx.mock("ref-" + os.path.basename(case), script)
        ref_patch = ctx.ref_patch(os.path.basename(case), url)
        theirs = drive(ctx.rt, "sdk", ref_patch, case + "/ref-home", case + "/cwd", "mock", "mock-model", prompts)
        ctx.stop_mocks()
        with open(case + "/notifications.json", "w") as f:
            json.dump({"dsh": ours, "reference": theirs}, f, indent=1)
        differences = compare(name, ours, theirs)
        if differences and difference:
            known += 1
            print(f"KNOWN {name}: {difference}\n      " + "\n".join(differences).replace("\n", "\n      "))
            continue
        failed += bool(differences)
        ctx.record(name, not differences, "\n".join(differences))
    agreed = len(ctx.results) - failed
    print(f"{agreed} of {len(ctx.results) + known} scenarios: the SDK saw the same on both runtimes; "
          f"{failed} failed, {known} known differences")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
