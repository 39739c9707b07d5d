#!/usr/bin/env python3
"""Markdown tables for docs/performance.md from the reports bench/runs/matrix.sh wrote.

    python3 bench/tables/tables.py target/bench-matrix > /tmp/tables.md
"""
import json
import os
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "target/bench-matrix"
TARGETS = [("switchyard", "Switchyard"), ("peer", "Go peer")]
SIZES = [(1000, "Unit1"), (10000, "Unit10"), (19000, "19k (max)")]
SCENARIOS = [
    ("echo", "Echo"),
    ("broadcast", "Broadcast (2 senders)"),
    ("small-group", "Send to small group (10 members; 1 in 5 send)"),
    ("big-group", "Send to big group (10 groups; 20 senders)"),
    ("send-to-connection", "Send to connection"),
    ("rest-broadcast", "REST broadcast (2 callers)"),
    ("rest-send-to-user", "REST send to user (1 in 5 users a second)"),
    ("join-leave-group", "Join/leave group (acknowledged)"),
]
MAX = [
    ("echo", "Echo, 10,000 connections, every 200 ms"),
    ("broadcast", "Broadcast to 1,000, 40 → 200 senders"),
    ("small-group", "Small groups, 10,000 connections, every 500 ms"),
    ("send-to-connection", "Send to connection, 10,000 connections, every 200 ms"),
    ("rest-broadcast", "REST broadcast to 1,000, 40 → 200 callers"),
    ("rest-send-to-user", "REST send to user, 10,000 users, every 500 ms"),
]


def load(name):
    path = os.path.join(OUT, name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def step_of(r):
    last = r.get("last_passing_step")
    if last:
        return r["steps"][last - 1], True
    return (r["steps"][-1] if r["steps"] else {}), False


def n(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def mem(kb):
    return "–" if not kb else f"{kb / 1024:,.0f} MB"


def usage(s, r):
    svc = s.get("service") or {}
    app = s.get("app_server") or {}
    cores = svc.get("cores")
    if app:
        cores_text = f"{n(cores, 2)} + {n(app.get('cores'), 2)}"
        rss = f"{mem(svc.get('rss_kb'))} + {mem(app.get('rss_kb'))}"
    else:
        cores_text = n(cores, 2)
        rss = mem(svc.get("rss_kb"))
    return cores_text, rss


def row(label, r):
    if r is None:
        return f"| {label} | not run |" + " |" * 9
    s, passed = step_of(r)
    cores, rss = usage(s, r)
    counts = f"{r['lost']} / {r['duplicated']} / {r['reordered']}"
    per = s.get("service_cpu_us_per_delivery")
    svc = s.get("service") or {}
    app = s.get("app_server") or {}
    total_cores = (svc.get("cores") or 0) + (app.get("cores") or 0)
    delivered = s.get("outbound_per_s") or 0
    per_total = total_cores * 1e6 / delivered if delivered else None
    verdict = r.get("azure_unit") or ("pass" if passed else "FAIL")
    if not passed:
        verdict = "FAIL"
    return (
        f"| {label} | {n(s.get('inbound_per_s'))} | {n(s.get('outbound_per_s'))} | "
        f"{n(s.get('p50_ms'), 1)} | {n(s.get('p99_ms'), 1)} | {n(s.get('max_ms'), 0)} | {counts} | "
        f"{cores} | {rss} | {n(per, 1)} / {n(per_total, 1)} | {verdict} |"
    )


HEADER = (
    "| Target, connections | In msg/s | Out msg/s | p50 ms | p99 ms | max ms | lost / dup / reord | "
    "CPU cores (service + app) | RSS (service + app) | CPU µs per delivery (service / all) | Azure unit |\n"
    "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|"
)

for key, title in SCENARIOS:
    print(f"#### {title}\n")
    print(HEADER)
    for target, tname in TARGETS:
        for size, sname in SIZES:
            print(row(f"{tname}, {sname}", load(f"{target}-{key}-{size}")))
    print()

print("#### Connections: memory held and connect rate\n")
print("| Target, connections | Service RSS per idle connection | Service RSS | Connects/s | connect p50 ms | connect p99 ms | failed |")
print("|:--|--:|--:|--:|--:|--:|--:|")
for target, tname in TARGETS:
    for size, sname in SIZES:
        idle = load(f"{target}-idle-{size}")
        rate = load(f"{target}-connect-rate-{size}")
        per = idle and idle.get("service_rss_per_connection_bytes")
        held = idle and idle["steps"] and (idle["steps"][0].get("service") or {}).get("rss_kb")
        if rate:
            s, _ = step_of(rate)
            print(
                f"| {tname}, {sname} | {n(per)} B | {mem(held)} | {n(rate.get('connects_per_s'))} | "
                f"{n(s.get('p50_ms'), 1)} | {n(s.get('p99_ms'), 1)} | {rate['connections_failed']} |"
            )
        else:
            print(f"| {tname}, {sname} | {n(per)} B | {mem(held)} | – | – | – | – |")
print()

print("#### Throughput: senders stepped up until Azure's rule fails\n")
print("| Scenario | Target | Steps run | Last passing step: in msg/s | out msg/s | p99 ms | CPU cores (service + app) | Next step |")
print("|:--|:--|--:|--:|--:|--:|--:|:--|")
for key, title in MAX:
    for target, tname in TARGETS:
        r = load(f"{target}-max-{key}")
        if r is None:
            print(f"| {title} | {tname} | not run | | | | | |")
            continue
        s, passed = step_of(r)
        cores, _ = usage(s, r)
        last = r.get("last_passing_step") or 0
        nxt = r["steps"][last] if last < len(r["steps"]) else None
        if nxt:
            nxt_text = (
                f"failed: {n(nxt['inbound_per_s'])} in/s, p99 {n(nxt['p99_ms'], 0)} ms, "
                f"{nxt['lost']} lost"
            )
        else:
            nxt_text = "none (all passed)"
        if not passed:
            print(f"| {title} | {tname} | {len(r['steps'])} | no step passed | | | | {nxt_text} |")
            continue
        print(
            f"| {title} | {tname} | {len(r['steps'])} | {n(s['inbound_per_s'])} | {n(s['outbound_per_s'])} | "
            f"{n(s['p99_ms'], 1)} | {cores} | {nxt_text} |"
        )
