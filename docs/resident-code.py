#!/usr/bin/env python3
"""Which code of `hotsh` is resident after `initialize`, by crate (see docs/benchmarks.md).

Usage (as root, or as the agent's user with /proc/PID/pagemap readable):
    python3 docs/resident-code.py PATH/TO/hotsh [SECONDS_AFTER_INITIALIZE]

PATH/TO/hotsh must carry its symbols (a release build with CARGO_PROFILE_RELEASE_STRIP=none);
its plugins are found beside it as usual. Prints the resident code and the 25 largest crates.
"""
import os, subprocess, sys, tempfile, time, struct, re, bisect, collections
hotsh = os.path.realpath(sys.argv[1])
data = tempfile.mkdtemp()
env = dict(os.environ, HOTSH_LOG="warn", HOTSH_DATA_DIR=data, TMPDIR=data)
p = subprocess.Popen([hotsh, "acp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=data)
p.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n'); p.stdin.flush()
p.stdout.readline(); time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
PAGE = 4096
resident = []  # file offsets of resident pages of the executable's code
with open("/proc/%d/pagemap" % p.pid, "rb") as pm:
    for line in open("/proc/%d/maps" % p.pid):
        f = line.split()
        if len(f) < 6 or f[5] != hotsh or "x" not in f[1]: continue
        a, b = [int(x, 16) for x in f[0].split("-")]; off = int(f[2], 16)
        pm.seek(a // PAGE * 8); raw = pm.read((b - a) // PAGE * 8)
        for i in range((b - a) // PAGE):
            (e,) = struct.unpack_from("<Q", raw, i * 8)
            if e >> 63: resident.append((a + i * PAGE, off + i * PAGE))
p.stdin.close(); p.wait()
# ELF: file offset -> vaddr for the code segment
hdr = subprocess.run(["readelf", "-lW", hotsh], capture_output=True, text=True).stdout
segs = []
for l in hdr.splitlines():
    m = re.match(r"\s*LOAD\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(\S+)", l)
    if m: segs.append(tuple(int(m.group(i), 16) for i in range(1, 5)) + (m.group(5),))
def vaddr(off):
    for (o, v, fs, ms, fl) in segs:
        if o <= off < o + fs: return v + off - o
syms = []
for l in subprocess.run(["nm", "-C", "-S", "--defined-only", hotsh], capture_output=True, text=True).stdout.splitlines():
    f = l.split(" ", 3)
    if len(f) == 4 and f[2] in "tTwW": syms.append((int(f[0], 16), int(f[1], 16), f[3]))
syms.sort(); starts = [s[0] for s in syms]
def crate(name):
    n = name.lstrip("<&*( ")
    n = re.sub(r"^(dyn |impl |mut |const )", "", n)
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)", n)
    return m.group(1) if m else "?"
by = collections.Counter(); total = 0
for (va_run, off) in resident:
    v = vaddr(off)
    if v is None: continue
    total += PAGE
    i = bisect.bisect_right(starts, v + PAGE) - 1
    covered = 0
    while i >= 0 and syms[i][0] + syms[i][1] > v:
        s, size, name = syms[i]
        lo, hi = max(s, v), min(s + size, v + PAGE)
        if hi > lo: by[crate(name)] += hi - lo; covered += hi - lo
        i -= 1
        if s < v - (1 << 20): break
    by["(no symbol)"] += max(0, PAGE - covered)
print("resident code %.1f MiB" % (total / 2**20))
for k, v in by.most_common(25): print("%7.0f KiB %s" % (v / 1024, k))
