#!/usr/bin/env bash
# The Unit50 and Unit100 rows of docs/performance.md ("Unit50 and Unit100 on this machine"):
# 50,000 connections over three nodes and 100,000 over six, one redis-server, every
# scenario the cluster serves (serverless: REST sends to everyone, big and small groups, one
# connection and one user from another node, acknowledged group joins/leaves), 2,048-byte
# messages, WebSockets + JSON. switchyard-bench starts Redis and the nodes and stops them.
# Reports (--summary-json) and tables go to target/bench-units/.
# Usage: bench/runs/units.sh [50|100] [ROW…]   (default both units, every row; ~12 minutes for
# Unit50, ~20 for Unit100). ROW names runs to repeat, e.g. `bench/runs/units.sh 100 rest-user`.
# Each run waits until no compiler has run for 10 s (the numbers are the machine's
# otherwise) and is bounded by `timeout`.
set -euo pipefail
source "$(dirname "$0")/common.sh"
out=target/bench-units
mkdir -p "$out"
summary='Outbound \(|Latency p50|Latency p99 |≥ 1 s|Lost|Connections failed|Service CPU|Service RSS|generator|Redis CPU \(|PUBLISH|Azure rule|memory per|Connects per'

# Rows named on the command line only, when any are (`bench/runs/units.sh 100 rest-user`).
only=()
wanted() {
  [ "${#only[@]}" -eq 0 ] && return 0
  local row
  for row in "${only[@]}"; do [ "${1#u*-}" = "$row" ] && return 0; done
  return 1
}
row() {
  wanted "$1" || return 0
  run "$@"
}
M=(--message-size 2048 -d 30s --warmup 5s --drain 10s)

unit() {
  local u=$1 shape
  if [ "$u" = 50 ]; then
    shape=(--nodes 3 -c 50000 -w 3 --source-addresses 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4
      --connect-rate 4000 --max-connecting 512)
  else
    # Slower connects: six nodes and six generators on two cores keep a negotiated
    # connection waiting past the service's 5 s connect timeout at 4,000/s.
    shape=(--nodes 6 -c 100000 -w 6
      --source-addresses 127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6
      --connect-rate 1500 --max-connecting 128)
  fi
  local p="u$u"
  row "$p-idle" idle "${S[@]}" "${shape[@]}" -d 10s --drain 0s
  # Everyone: one broadcast every 2 s (Azure's row: 2 a second).
  row "$p-rest-broadcast" rest-broadcast "${S[@]}" "${shape[@]}" -s 1 --send-interval 2s "${M[@]}"
  # Big groups: 10 groups of conns/10, 10 callers at 1/s (Azure's row: 20 messages/s).
  row "$p-rest-group-big" rest-send-to-group "${S[@]}" "${shape[@]}" --groups 10 -s 10 \
    --send-interval 1s "${M[@]}"
  if [ "$u" = 100 ]; then
    # Half that: 10,000 × 5 a second (100,000 deliveries/s fills both cores here).
    row "$p-rest-group-big-5" rest-send-to-group "${S[@]}" "${shape[@]}" --groups 10 -s 5 \
      --send-interval 1s "${M[@]}"
  fi
  # Small groups: groups of 10 spread over every node, 2,000 calls/s (20,000 deliveries/s).
  # REST enters every node: when one node held its 16,667 clients and every REST connection,
  # a stall made the callers open more connections until it reached its socket limit and
  # answered 503 (2,683 calls in one Unit100 run).
  row "$p-rest-group-small" rest-send-to-group "${S[@]}" "${shape[@]}" --group-size 10 -s 2000 \
    --rest-node all --send-interval 1s "${M[@]}"
  # One connection / one user, each call entering a node that does not hold it.
  row "$p-rest-connection" rest-send-to-connection "${S[@]}" "${shape[@]}" --rest-node all \
    -s 3000 --send-interval 1s "${M[@]}"
  row "$p-rest-user" rest-send-to-user "${S[@]}" "${shape[@]}" --rest-node all \
    -s 3000 --send-interval 1s "${M[@]}"
  # Acknowledged joins and leaves of 10 groups, 2,000 a second, from another node.
  row "$p-rest-join-leave" rest-join-leave-group "${S[@]}" "${shape[@]}" --rest-node all \
    --groups 10 -s 2000 --send-interval 1s "${M[@]}"
}

which=${1:-both}
[ $# -gt 0 ] && shift
only=("$@")
case "$which" in
  50) unit 50 ;;
  100) unit 100 ;;
  *) unit 50; unit 100 ;;
esac
