#!/usr/bin/env python3
"""The Unit50/Unit100 table of docs/performance.md from the reports bench/runs/units.sh wrote.

    python3 bench/tables/unit_tables.py target/bench-units > /tmp/units.md
"""
import json
import os
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "target/bench-units"
UNITS = [(50, "Unit50: 50,000 over 3 nodes"), (100, "Unit100: 100,000 over 6 nodes")]
# (file suffix, what the row is, Azure's published outbound/s for Unit50 and Unit100)
ROWS = [
    ("rest-broadcast", "REST broadcast, 1 every 2 s, to everyone", (100_000, 200_000)),
    ("rest-group-big", "REST send to big group: 10 groups, 10 calls/s", (100_000, 200_000)),
    ("rest-group-big-5", "REST send to big group: 10 groups, 5 calls/s", (None, 200_000)),
    ("rest-group-small", "REST send to small group: groups of 10, 2,000 calls/s", (100_000, 100_000)),
    ("rest-connection", "REST send to connection, 3,000/s, from another node", (20_000, 20_000)),
    ("rest-user", "REST send to user, 3,000/s, from another node", (10_000, 20_000)),
    ("rest-join-leave", "REST add/remove to group, 2,000/s, from another node (acknowledged)", (None, None)),
]


def load(name):
    try:
        with open(os.path.join(OUT, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def n(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def mem(kb):
    return "–" if not kb else f"{kb / 1024:,.0f} MB"


def share_over_1s(r):
    """Deliveries at 1 s or more, lost ones included (Azure's rule), in % of expected."""
    expected = r.get("expected") or 0
    if not expected:
        return None
    slow = sum(count for name, count in r.get("buckets_v1") or [] if name == "message:ge:1000")
    return (slow + (r.get("lost") or 0)) * 100.0 / expected


print("| Scenario | Unit | Out msg/s (Azure's) | p50 ms | p99 ms | ≥ 1 s or lost | lost / dup / reord | conn. failed | Service cores | Service µs/delivery | Generator cores | Service RSS | PUBLISH/msg | Redis bytes/msg | Azure rule |")
print("|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|")
for key, title, azure in ROWS:
    for (unit, _), published in zip(UNITS, azure):
        r = load(f"u{unit}-{key}")
        if r is None:
            continue
        s = r["steps"][0] if r["steps"] else {}
        svc = s.get("service") or {}
        gen = s.get("generator") or {}
        redis = s.get("redis") or {}
        over = share_over_1s(s)
        out = n(s.get("outbound_per_s")) + (f" ({n(published)})" if published else "")
        print(
            f"| {title} | Unit{unit} | {out} | {n(s.get('p50_ms'), 1)} | {n(s.get('p99_ms'), 1)} | "
            f"{'–' if over is None else f'{over:.2f} %'} | "
            f"{r['lost']} / {r['duplicated']} / {r['reordered']} | {r['connections_failed']} | "
            f"{n(svc.get('cores'), 2)} | {n(s.get('service_cpu_us_per_delivery'), 1)} | "
            f"{n(gen.get('cores'), 2)} | {mem(svc.get('rss_kb'))} | "
            f"{n(redis.get('publish_per_message'), 2)} | {n(redis.get('bytes_per_message'))} | "
            f"{'pass' if s.get('passed') else 'FAIL'} |"
        )
print()
print("| Idle | Connections held | failed | Connects/s | Service RSS | per connection | Redis RSS |")
print("|:--|--:|--:|--:|--:|--:|--:|")
for unit, title in UNITS:
    r = load(f"u{unit}-idle")
    if r is None:
        print(f"| {title} | not run | | | | | |")
        continue
    s = r["steps"][0] if r["steps"] else {}
    svc = s.get("service") or {}
    redis = ((r.get("cluster") or {}).get("redis") or {}).get("process") or {}
    print(
        f"| {title} | {n(r['connections'] - r['connections_failed'])} | {r['connections_failed']} | "
        f"{n(r.get('connects_per_s'))} | {mem(svc.get('rss_kb'))} | "
        f"{n(r.get('service_rss_per_connection_bytes'))} B | {mem(redis.get('rss_kb'))} |"
    )
