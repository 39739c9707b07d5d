#!/usr/bin/env bash
# Runs the ADR 0001 measurements. Usage:
#   ./bench.sh [candidate ...]        (default: all candidates)
# Env: RUNS (default 2), CONNS (10000), RATE (2000/s), HOLD (5 s),
#      ECHO_SECS (10), ECHO_CONNS (100), HELLO (1), ECHO (1; 0 = idle only),
#      BIN (binaries dir). WS_READ_BUF / WS_WRITE_BUF pass through to the server.
# Every process is bounded: the server exits after 120 s, each loadgen call
# is wrapped in `timeout`.
set -euo pipefail
ulimit -n 20000

BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}
RUNS=${RUNS:-2}
CONNS=${CONNS:-10000}
RATE=${RATE:-2000}
HOLD=${HOLD:-5}
ECHO_SECS=${ECHO_SECS:-10}
ECHO_CONNS=${ECHO_CONNS:-100}
HELLO=${HELLO:-1}
ECHO=${ECHO:-1}
CANDIDATES=("$@")
[ ${#CANDIDATES[@]} -eq 0 ] && CANDIDATES=(tt-raw tt-hyper tt-hyper-default axum axum-default fastws tokio-ws)

port=${PORT_BASE:-19000}

start_server() { # candidate -> sets SPID
  port=$((port + 1))
  "$BIN/server" "$1" "$port" 120 >/dev/null &
  SPID=$!
  sleep 0.5
}
stop_server() { kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; }

for c in "${CANDIDATES[@]}"; do
  for run in $(seq 1 "$RUNS"); do
    start_server "$c"
    echo "$c run=$run $(timeout 90 "$BIN/loadgen" idle --port "$port" --pid "$SPID" \
      --conns "$CONNS" --rate "$RATE" --hold "$HOLD" --hello "$HELLO")"
    stop_server
    [ "$ECHO" = 1 ] || continue
    for size in 256 2048; do
      start_server "$c"
      echo "$c run=$run $(timeout 60 "$BIN/loadgen" echo --port "$port" \
        --conns "$ECHO_CONNS" --size "$size" --secs "$ECHO_SECS")"
      stop_server
    done
  done
done
