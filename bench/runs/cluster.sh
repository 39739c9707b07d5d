#!/usr/bin/env bash
# The cost of the cluster itself (docs/performance.md, "Cluster: the cost of crossing nodes"):
# the same loads against one node without Redis, one node on Redis (`--nodes 1`) and three
# nodes on one Redis (`--nodes 3`); switchyard-bench starts redis-server and the nodes itself
# and stops them at the end. Reports (--summary-json) and tables go to target/bench-cluster/.
# Usage: bench/runs/cluster.sh [quick|default|chat]
#   quick:   the serverless 3,000-connection rows only (~6 minutes)
#   default: Default-mode echo and send to connection, 3,000 connections (~7 minutes)
#   chat:    the chat rooms, 10,000 connections in rooms of 100, both variants (~6 minutes)
# The whole set takes about 40 minutes; every run is bounded by `timeout`.
set -euo pipefail
source "$(dirname "$0")/common.sh"
out=target/bench-cluster
mkdir -p "$out"
summary='App server CPU|Latency p50|Latency p99 |Lost|Service CPU|Service RSS|Redis|PUBLISH|memory per|Connects per|^  n'
run_timeout=420
RB=(-s 10 --send-interval 1s --message-size 2048 -d 20s --warmup 5s --drain 5s)
two=(-w 2 --source-addresses 127.0.0.1,127.0.0.2)
four=(--source-addresses 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4)
conns=(3000)
[ "${1:-}" = quick ] || conns=(3000 10000)
what=${1:-all}
case "$what" in all | quick | default | chat) ;; *) echo "usage: $0 [quick|default|chat]" >&2; exit 2 ;; esac

# Default mode (docs: "Default mode across nodes"): every connection invokes once a second,
# as the single-node rows do. On three nodes the app server is given n1's connection string
# and the others ask it to connect to them; connection g sends to connection g + 1, which is
# on the next node.
if [ "$what" = all ] || [ "$what" = default ]; then
  D=(-c 3000 --send-interval 1s --message-size 2048 -d 20s --warmup 5s --drain 5s)
  for s in echo send-to-connection; do
    run "$s-3000-single" "$s" "${S[@]}" "${D[@]}"
    run "$s-3000-nodes1" "$s" "${S[@]}" --nodes 1 "${D[@]}"
    run "$s-3000-nodes3" "$s" "${S[@]}" --nodes 3 "${D[@]}"
  done
  # The floor under those: the same connections and app server, 3 senders.
  run echo-3000-floor-nodes1 echo "${S[@]}" --nodes 1 "${D[@]}" -s 3
  run echo-3000-floor-nodes3 echo "${S[@]}" --nodes 3 "${D[@]}" -s 3
fi

# Chat rooms: 10,000 connections in rooms of 100 (1,000 post every 11 s, 2,000 every 59 s:
# ~125 posts/s, ~12,500 deliveries/s). Serverless posts enter the poster's node
# (--rest-node all).
if [ "$what" = all ] || [ "$what" = chat ]; then
  CH=(-c 10000 --group-size 100 -d 30s --warmup 5s --drain 5s "${two[@]}" --connect-rate 4000)
  run chat-10000-single chat-room "${S[@]}" "${CH[@]}"
  run chat-10000-nodes3 chat-room "${S[@]}" --nodes 3 "${CH[@]}"
  run rchat-10000-single rest-chat-room "${S[@]}" "${CH[@]}"
  run rchat-10000-nodes3 rest-chat-room "${S[@]}" --nodes 3 --rest-node all "${CH[@]}"
fi
[ "$what" = all ] || [ "$what" = quick ] || exit 0

# REST broadcast, 10 callers at 1/s: one node, one node on Redis, three nodes (REST into n1).
for c in "${conns[@]}"; do
  w=()
  [ "$c" -gt 5000 ] && w=("${two[@]}")
  run "rb-$c-single" rest-broadcast "${S[@]}" -c "$c" "${RB[@]}" "${w[@]}"
  run "rb-$c-nodes1" rest-broadcast "${S[@]}" --nodes 1 -c "$c" "${RB[@]}" "${w[@]}"
  run "rb-$c-nodes3" rest-broadcast "${S[@]}" --nodes 3 -c "$c" "${RB[@]}" "${w[@]}"
done

# REST send to user: every user once a second (3,000 REST calls/s).
U=(--send-interval 1s --message-size 2048 -d 20s --warmup 5s --drain 5s)
run rsu-3000-single rest-send-to-user "${S[@]}" -c 3000 "${U[@]}"
run rsu-3000-nodes1 rest-send-to-user "${S[@]}" --nodes 1 -c 3000 "${U[@]}"
run rsu-3000-nodes3 rest-send-to-user "${S[@]}" --nodes 3 -c 3000 "${U[@]}"
[ "${1:-}" = quick ] && exit 0

# Redis's cost per broadcast well above its idle floor (200 broadcasts/s to 300 connections).
for n in single nodes1 nodes3; do
  nodes=()
  [ "$n" = nodes1 ] && nodes=(--nodes 1)
  [ "$n" = nodes3 ] && nodes=(--nodes 3)
  run "rb-300-200s-$n" rest-broadcast "${S[@]}" "${nodes[@]}" -c 300 -s 200 -d 20s --warmup 5s --drain 5s
done

# Connecting, and memory held per idle connection (10,000 per node in both).
C=(--connect-rate 4000 --max-connecting 512)
run cr-10000-single connect-rate "${S[@]}" -c 10000 "${two[@]}" "${C[@]}" -d 1s --drain 0s
run cr-10000-nodes3 connect-rate "${S[@]}" --nodes 3 -c 10000 "${two[@]}" "${C[@]}" -d 1s --drain 0s
run idle-10000-single idle "${S[@]}" -c 10000 "${two[@]}" "${C[@]}" -d 10s --drain 0s
run idle-30000-nodes3 idle "${S[@]}" --nodes 3 -c 30000 -w 2 \
  --source-addresses 127.0.0.1,127.0.0.2,127.0.0.3 "${C[@]}" -d 10s --drain 0s

# Unit50-shaped: 50,000 connections over three nodes (three generator processes), idle, then
# one REST broadcast every 2 s (25,000 deliveries/s).
run idle-50000-nodes3 idle "${S[@]}" --nodes 3 -c 50000 -w 3 "${four[@]}" "${C[@]}" -d 10s --drain 0s
run rb-50000-nodes3 rest-broadcast "${S[@]}" --nodes 3 -c 50000 -w 3 "${four[@]}" "${C[@]}" \
  -s 1 --send-interval 2s -d 30s --warmup 5s --drain 10s
run rb-16667-single rest-broadcast "${S[@]}" -c 16667 --source-addresses 127.0.0.1,127.0.0.2 "${C[@]}" \
  -s 1 --send-interval 2s -d 20s --warmup 5s --drain 10s
