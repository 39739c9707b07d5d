#!/usr/bin/env python3
"""CPU of every switchyard node, load generator and redis-server, every half second.

Run beside a benchmark to see which process stops or spins when latency jumps:

    python3 bench/runs/sample_procs.py 200 > /tmp/procs.jsonl &
    bench/runs/units.sh 100 rest-user

Each line: {"t": UNIX seconds, "cpu": {"n3:1234": ticks, "worker:1240": ticks, ...}} with
the CPU ticks (1/100 s) each process used in the last half second (50 = one full core).
"""
import json
import os
import sys
import time


def processes():
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            if not (comm.startswith("switchyard") or comm == "redis-server"):
                continue
            stat = open(f"/proc/{pid}/stat").read()
            fields = stat[stat.rfind(")") + 2:].split()
            cmd = open(f"/proc/{pid}/cmdline").read().split("\0")
        except OSError:
            continue
        label = comm
        if "worker" in cmd:
            label = "worker"
        if "--node-id" in cmd:
            label = cmd[cmd.index("--node-id") + 1]
        found[pid] = (label, int(fields[11]) + int(fields[12]))
    return found


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    end = time.time() + seconds
    before = processes()
    while time.time() < end:
        time.sleep(0.5)
        now = processes()
        cpu = {f"{label}:{pid}": ticks - before[pid][1]
               for pid, (label, ticks) in now.items() if pid in before}
        print(json.dumps({"t": round(time.time(), 1), "cpu": cpu}), flush=True)
        before = now


if __name__ == "__main__":
    main()
