#!/usr/bin/env bash
# The floor beside the service (docs/performance.md, "The floor"): each scenario runs against
# `switchyard-bench floor` (the least server that moves the same frames over the same sockets
# for the same generator) and against a release `switchyard serve`, interleaved ROUNDS times,
# and prints service CPU per delivery (user + system apart) and the service ÷ floor ratio.
# The floor runs Echo and Broadcast itself, where the service relays them through the app
# server, so for those rows the ratio also counts the app-server hop.
# Usage: bench/runs/floor.sh [ROUNDS] [SECONDS]   (default 2 rounds of 30 s per run)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-2}"
seconds="${2:-30}"
target="${CARGO_TARGET_DIR:-target}/release"
[ -x "$target/switchyard" ] && [ -x "$target/switchyard-bench" ] \
  || cargo build --release -p switchyard -p switchyard-bench
ulimit -n 20000
dir="$(mktemp -d -t switchyard-floor-XXXXXX)"
trap 'rm -rf "$dir"' EXIT
scenarios=(
  "rest-broadcast -c 3000 -s 10"
  "broadcast -c 3000 -s 10"
  "echo -c 2000"
  "idle -c 5000"
)
for round in $(seq "$rounds"); do
  for i in "${!scenarios[@]}"; do
    for side in floor service; do
      case "$side" in
        floor) how=(--floor) ;;
        service) how=(--service-bin "$target/switchyard") ;;
      esac
      # shellcheck disable=SC2086
      if ! "$target/switchyard-bench" ${scenarios[$i]} "${how[@]}" --duration "${seconds}s" \
        --summary-json "$dir/$i.$side.$round.json" > "$dir/$i.$side.$round.out" 2>&1; then
        echo "run failed: ${scenarios[$i]} on $side (round $round):"
        tail -5 "$dir/$i.$side.$round.out"
      fi
    done
  done
done
python3 - "$dir" "${scenarios[@]}" <<'PY'
import glob, json, os, sys
d, scenarios = sys.argv[1], sys.argv[2:]
def per(path):
    r = json.load(open(path))
    # The sending step alone (the connect phase and the drain are left out).
    step = (r.get("steps") or [r])[-1]
    s = step.get("service") or {}
    received = step.get("received") or 0
    cpu, system = s.get("cpu_seconds", 0.0), s.get("system_seconds", 0.0)
    if received:
        return ("µs/delivery", cpu * 1e6 / received, system * 1e6 / received)
    # idle: the service's memory per held connection
    return ("KiB/conn", (r.get("service_rss_per_connection_bytes") or 0) / 1024, 0.0)
print(f"| Scenario | Unit | Floor (user + system) | Switchyard (user + system) | Ratio |")
print("|---|---|---|---|---|")
for i, name in enumerate(scenarios):
    rows = {}
    for side in ("floor", "service"):
        got = [per(p) for p in sorted(glob.glob(f"{d}/{i}.{side}.*.json"))]
        if got:
            unit = got[0][0]
            rows[side] = (unit, sum(g[1] for g in got) / len(got), sum(g[2] for g in got) / len(got))
    if len(rows) < 2:
        print(f"| {name} | – | – | – | – |"); continue
    (unit, f, fs), (_, s, ss) = rows["floor"], rows["service"]
    split = lambda t, k: f"{t:.2f} ({t-k:.2f} + {k:.2f})" if unit != "KiB/conn" else f"{t:.2f}"
    print(f"| {name} | {unit} | {split(f, fs)} | {split(s, ss)} | {s / f if f else float('nan'):.2f}× |")
PY
