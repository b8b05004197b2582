#!/usr/bin/env python3
"""Writes host/symbol-order.txt: the agent's functions that run, start-up's first.

The release link lays these functions out together, in this order (host/build.rs), so that
the code a resting agent has run fills a few page-cache folios instead of touching folios
across the whole executable (ARCHITECTURE.md, "Memory at rest: the code laid out").

Usage (as root: it puts a uprobe on every function of the executable through tracefs):
    python3 docs/symbol-order.py

It builds the release binaries with a link map, copies them to a temporary directory, puts
a uprobe at the entry of each function the map lists (their hit counts say which ran, in
every process that runs that copy: the agent, its supervisor, its plugin checks), and runs,
one phase after the other:
  1. at rest: `initialize` and `session/new`, a second idle (the log at its default level),
     at a first start and at a next one (the plugins checked before), and the same before
     logging in with `HOTSH_LOG` naming a target (as `hotsh-bench
     startup` runs it);
  2. a turn of 20 commands (`hotsh-bench memory 1`);
  3. the rest of a working session (`hotsh-bench` toolcall, sessions, edit, models, mcp,
     card).
The list names each phase's new functions in their place in the executable. Run it again
after the compiler, a dependency or hotsh's version changes (each renames most functions,
and a name the build no longer has only goes back to its default place).
"""
import json, os, re, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = "/sys/kernel/tracing"
GROUP = "hotsh_order"


def text_sections(link_map):
    """The `.text.<symbol>` input sections of the map: (address, size, symbol), by address."""
    line_re = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+( +)(.*)$")
    sections, in_text = [], False
    for line in open(link_map):
        m = line_re.match(line.rstrip("\n"))
        if not m:
            continue
        indent, name = len(m.group(3)), m.group(4)
        if indent == 1:  # an output section
            in_text = name == ".text"
        elif in_text and indent == 9:  # an input section
            # (`.text.unlikely.<symbol>` for a function marked cold, and the like)
            s = re.search(r":\(\.text\.(?:(?:unlikely|hot|startup|exit|split)\.)?(.+)\)$", name)
            if s and int(m.group(2), 16) > 0:
                sections.append((int(m.group(1), 16), int(m.group(2), 16), s.group(1)))
    return sorted(sections)


def file_offset(binary):
    """Maps an address of the executable to its offset in the file."""
    loads = []
    out = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        m = re.match(r"\s*LOAD\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+\s+(0x[0-9a-f]+)", line)
        if m:
            loads.append(tuple(int(m.group(i), 16) for i in (1, 2, 3)))
    return lambda a: next(o + a - v for (o, v, size) in loads if v <= a < v + size)


def write_probes(text):
    fd = os.open(f"{TRACE}/uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def add_probes(sections, binary):
    offset = file_offset(binary)
    lines = [f"p:{GROUP}/f{i} {binary}:0x{offset(a):x}\n" for i, (a, _, _) in enumerate(sections)]
    for at in range(0, len(lines), 100):
        write_probes("".join(lines[at:at + 100]))
    with open(f"{TRACE}/events/{GROUP}/enable", "w") as f:
        f.write("1")


def remove_probes():
    """Removes this script's probes (disabling 17,000 of them takes the kernel minutes)."""
    if os.path.exists(f"{TRACE}/events/{GROUP}"):
        with open(f"{TRACE}/events/{GROUP}/enable", "w") as f:
            f.write("0")
    events = open(f"{TRACE}/uprobe_events").read().splitlines()
    ours = [line.split()[0][2:] for line in events if line.startswith(f"p:{GROUP}/")]
    if ours and len(ours) == len(events):
        # Only ours: emptying the file removes them at once (one by one takes the kernel
        # half an hour, a reset of the trace buffers each).
        with open(f"{TRACE}/uprobe_events", "w"):
            pass
        return
    for at in range(0, len(ours), 100):
        write_probes("".join(f"-:{name}\n" for name in ours[at:at + 100]))


def hits(binary):
    """How often each probe on `binary` fired (its lines: path, event name, hits)."""
    counts = {}
    for line in open(f"{TRACE}/uprobe_profile"):
        f = line.split()
        if len(f) == 3 and f[0] == binary and re.fullmatch(r"f\d+", f[1]):
            counts[int(f[1][1:])] = int(f[2])
    return counts


def at_rest(directory, model=True, log=None, starts=1):
    """`initialize`, `session/new`, a second idle, as Zed starts the agent (its log at the
    default level, to stderr); with `model=False`, as a user who has not logged in yet; with
    `log`, that `HOTSH_LOG` (a directive naming a target is parsed by other code); `starts`
    times with the same data directory (the first start checks the plugins in a process
    each, the next ones load the builds checked before, as most starts do)."""
    work = tempfile.mkdtemp(prefix="hotsh-order-")
    script = os.path.join(work, "script.json")
    with open(script, "w") as f:
        json.dump({"responses": []}, f)
    # No key and no hotsh setting of this shell's reaches it.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HOTSH_") and not k.endswith("_API_KEY")}
    env.update(HOTSH_DATA_DIR=os.path.join(work, "data"), **({"HOTSH_LOG": log} if log else {}))
    args = ["acp", "--model", f"script:{script}"] if model else []
    for _ in range(starts):
        agent = subprocess.Popen(
            [os.path.join(directory, "hotsh"), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            cwd=work)
        for n, (method, params) in enumerate([
                ("initialize", {"protocolVersion": 1, "clientCapabilities": {}}),
                ("session/new", {"cwd": work, "mcpServers": []})]):
            agent.stdin.write((json.dumps(
                {"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n").encode())
            agent.stdin.flush()
            while json.loads(agent.stdout.readline()).get("id") != n:
                pass
        time.sleep(1)
        agent.stdin.close()
        agent.wait()
    shutil.rmtree(work, ignore_errors=True)


def bench(directory, *args):
    bench = os.path.join(ROOT, "target", "release", "hotsh-bench")
    env = dict(os.environ, HOTSH_BENCH_DIR=directory)
    subprocess.run([bench, *args], env=env, check=True, stdout=subprocess.DEVNULL)


def main():
    if not os.path.exists(f"{TRACE}/uprobe_events"):
        # A fresh machine may not have it mounted.
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACE], check=True)
    work = tempfile.mkdtemp(prefix="hotsh-order-")
    link_map = os.path.join(work, "hotsh.map")
    # The build README's first command makes (the workspace's default members): another set
    # of packages can unify other features of a dependency, which renames its functions.
    subprocess.run(["cargo", "build", "--release"], cwd=ROOT, check=True,
                   env=dict(os.environ, HOTSH_LINK_MAP=link_map))
    subprocess.run(["cargo", "build", "--release", "-p", "hotsh-tests", "--bin", "hotsh-bench"],
                   cwd=ROOT, check=True)
    release = os.path.join(ROOT, "target", "release")
    directory = os.path.join(work, "bin")
    os.mkdir(directory)
    for name in ["hotsh", "hotsh-shim", "libhotsh_tool_bash.so", "libhotsh_tool_fs.so"]:
        shutil.copy(os.path.join(release, name), directory)
    sections = text_sections(link_map)
    binary = os.path.join(directory, "hotsh")
    remove_probes()
    phases = []
    try:
        add_probes(sections, binary)
        at_rest(directory, starts=2)
        at_rest(directory, model=False, log="warn,hotsh_host::plugins=info", starts=2)
        phases.append(("at rest", hits(binary)))
        bench(directory, "memory", "1")
        phases.append(("a turn of 20 commands", hits(binary)))
        for args in [["toolcall", "5"], ["sessions", "1000", "1"], ["edit", "3", "1"],
                     ["models", "5", "1"], ["mcp", "5", "1"], ["card", "3"]]:
            bench(directory, *args)
        phases.append(("the rest of a session", hits(binary)))
        order, seen = [], set()
        for name, counts in phases:
            new = [i for i in sorted(counts) if counts[i] > 0 and i not in seen]
            seen.update(new)
            order += new
            size = sum(sections[i][1] for i in new) / 1048576
            print(f"{name}: {len(new)} more functions, {size:.2f} MiB of code", file=sys.stderr)
        if not order:
            sys.exit("no probe fired: host/symbol-order.txt is left as it was")
        rustc = subprocess.run(["rustc", "--version"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
        with open(os.path.join(ROOT, "host", "symbol-order.txt"), "w") as f:
            # The linker skips lines starting with `#`; host/build.rs reads this one.
            f.write(f"# made by docs/symbol-order.py with {rustc}\n")
            f.writelines(sections[i][2] + "\n" for i in order)
    finally:
        print("removing the probes (minutes)", file=sys.stderr)
        remove_probes()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
