#!/usr/bin/env bash
# The soak of docs/performance.md ("Soak"): 20,000 chat-room members (dotNetify's profile,
# Default mode, rooms of 100) on three nodes and one redis-server for 31 minutes of sending;
# node 2 or 3 (in turn) SIGKILLed every 5 minutes and started again 30 s later on its port,
# redis-server SIGKILLed at 17:30 and started again 2 s later. switchyard-bench starts and
# kills everything itself; clients of a killed node rejoin their room on another node.
# Not part of any default run: ~33 minutes, bounded by `timeout`. Output (table, phases,
# memory series) in target/bench-soak/ (SOAK_OUT overrides).
# Usage: bench/runs/soak.sh [DURATION [REDIS_AT]]   (defaults 31m and 17m30s)
set -euo pipefail
source "$(dirname "$0")/common.sh"
out=${SOAK_OUT:-target/bench-soak}
mkdir -p "$out"
duration=${1:-31m}
redis_at=${2:-17m30s}
quiet_machine
echo "=== soak: $duration, 20,000 connections, 3 nodes [load $(cut -d" " -f1-3 /proc/loadavg)]"
# Two generator processes of 10,000 connections each (a process may hold 20,000 files);
# two source addresses keep each one's ports well inside the ephemeral range.
timeout 45m "$bench" chat-room "${S[@]}" --nodes 3 -c 20000 -w 2 \
  --source-addresses 127.0.0.1,127.0.0.2 --connect-rate 4000 --max-connecting 512 \
  -d "$duration" --warmup 30s --drain 10s \
  --kill-node-every 5m --node-down-for 30s --restart-redis-at "$redis_at" --redis-down-for 2s \
  --rss-every 20s --quiet --summary-json "$out/soak.json" --soak-json "$out/soak-phases.json" \
  --rss-csv "$out/soak-rss.csv" >"$out/soak.txt" 2>&1 || echo "exit status $?"
sed -n '/^Soak phases/,$p' "$out/soak.txt"
