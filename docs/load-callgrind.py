#!/usr/bin/env python3
"""Counts the instructions a `session/load` costs the agent, under callgrind.

The log is the one `hotsh-bench sessions` times with cards (a card every 10 records:
prompt, text, a command with 4 output chunks, its result, more text), 10,000 records.
The agent starts under valgrind with instrumentation off; once its plugins had time to
load (they are refused under valgrind: no card is drawn anew, so this counts the reading,
the fold and the updates), instrumentation is turned on for the load alone. Instruction
counts compare builds on a noisy machine, where times do not; the time on two cores is
`hotsh-bench load`'s.

    python3 docs/load-callgrind.py target/release/hotsh /tmp/load.callgrind
    callgrind_annotate /tmp/load.callgrind | head -40   # with a build that has symbols

Needs valgrind (callgrind_control comes with it).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

RECORDS = 10_000
SESSION = "6f0e2b4c-0b7d-4c61-9a35-3c2ea7f0b001"


def write_log(work: str, data: str) -> None:
    lines = []

    def push(kind: str, record: dict) -> None:
        lines.append(
            '{"v":1,"seq":%d,"at":"2026-11-30T20:00:00.000Z","type":%s,"data":%s}'
            % (len(lines) + 1, json.dumps(kind), json.dumps(record, separators=(",", ":")))
        )

    push("session", {"session_id": SESSION, "cwd": work, "created_at": "2026-11-30T20:00:00.000Z", "agent": "bench"})
    call = 0
    while len(lines) < RECORDS:
        push("prompt", {"text": "do it", "blocks": [{"type": "text", "text": "do it"}]})
        push("agent_text", {"text": "word 0 "})
        call += 1
        call_id = "call-%d" % call
        card = {"terminal": {"command": "seq 1 10", "description": None, "cwd": work, "exit": None}}
        push("tool_call_started", {"call_id": call_id, "tool": "bash", "card": card, "raw_input": {"command": "seq 1 10"}, "arguments": '{"command":"seq 1 10"}'})
        for _ in range(4):
            push("tool_output", {"call_id": call_id, "text": "1\n2\n3\n4\n5\n"})
        done = {"terminal": {"command": "seq 1 10", "description": None, "cwd": work, "exit": {"exit_code": 0, "signal": None}}}
        push("tool_call_finished", {"call_id": call_id, "card": done, "status": "completed", "raw_output": {"exit_code": 0}, "error": None, "output_text": "1\n2"})
        push("tool_result", {"call_id": call_id, "text": "1\n2", "is_error": False})
        push("agent_text", {"text": "Done."})
    with open(os.path.join(data, "sessions", SESSION + ".jsonl"), "w") as log:
        log.write("\n".join(lines) + "\n")


def main() -> None:
    hotsh, out = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp()
    data = os.path.join(work, "data")
    os.makedirs(os.path.join(data, "sessions"))
    write_log(work, data)
    # valgrind keeps its control pipe in TMPDIR: callgrind_control is given the same.
    env = dict(os.environ, HOTSH_LOG="warn", HOTSH_DATA_DIR=data, TMPDIR=data)
    agent = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out, hotsh, "acp"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )

    def send(message: dict) -> None:
        agent.stdin.write((json.dumps(message) + "\n").encode())
        agent.stdin.flush()

    def instrument(state: str) -> None:
        subprocess.run(["callgrind_control", "-i", state, str(agent.pid)], capture_output=True, env=env, check=True)

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {"_meta": {"terminal_output": True}}}})
    agent.stdout.readline()
    time.sleep(4)
    instrument("on")
    send({"jsonrpc": "2.0", "id": 99, "method": "session/load", "params": {"sessionId": SESSION, "cwd": work, "mcpServers": []}})
    updates = 0
    while b'"method"' in agent.stdout.readline():
        updates += 1
    instrument("off")
    agent.stdin.close()
    agent.wait()
    with open(out, errors="replace") as profile:
        total = next(int(line.split()[1]) for line in profile if line.startswith("totals:"))
    print("%d updates, %.1f M instructions" % (updates, total / 1e6))


if __name__ == "__main__":
    main()
