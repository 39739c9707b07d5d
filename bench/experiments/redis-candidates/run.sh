#!/usr/bin/env bash
# Runs the ADR 0005 measurements. Usage:
#   ./run.sh [section ...]     sections: pipe window lossy multi latency idle reconnect deps
#                              (default: all but deps; deps = dependency counts + clean builds)
# Env: RUNS (2), SECS (5, measured seconds per throughput run; 1 s warm-up more), COUNT (5000
#      latency samples), CANDIDATES ("rs fred raw"), REDIS_SERVER (/usr/bin/redis-server),
#      BIN (dir of the release binary; default $CARGO_TARGET_DIR/release).
# A fresh redis-server (--save "" --appendonly no, 127.0.0.1, a free port) is started for every
# measurement and stopped after it; it runs under `timeout -s KILL`, every bench process under
# `timeout`, and an EXIT trap kills whatever is left. Logs go to a temporary directory,
# removed at the end unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")"

BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}/redis-candidates
RUNS=${RUNS:-2}
SECS=${SECS:-5}
COUNT=${COUNT:-5000}
REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}
read -r -a CANDIDATES <<<"${CANDIDATES:-rs fred raw}"
SECTIONS=("$@")
[ ${#SECTIONS[@]} -eq 0 ] && SECTIONS=(pipe window lossy multi latency idle reconnect)
# fred's subscriber needs a broadcast channel larger than the bench's 4096-message lag bound,
# or it drops messages (section `lossy` shows fred's default of 32).
BCAST=8192

WORK=$(mktemp -d /tmp/redis-candidates.XXXXXX)
RPID=
cleanup() {
  [ -n "$RPID" ] && kill "$RPID" 2>/dev/null || true
  # A pidfile left behind names a redis-server of ours, unless its pid was reused since.
  local f pid
  for f in "$WORK"/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-server 127.0.0.1" &&
      kill -9 "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  local p
  for p in $(seq "${PORT_BASE:-16400}" 16999); do
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  return 1
}

start_redis() { # sets PORT and RPID
  PORT=$(free_port)
  timeout -s KILL 300 "$REDIS_SERVER" --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$WORK" --logfile "$WORK/redis.log" --pidfile "$WORK/redis-$PORT.pid" &
  RPID=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return
    sleep 0.05
  done
  echo "redis-server did not start" >&2; exit 1
}
stop_redis() {
  kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; RPID=
  rm -f "$WORK/redis-$PORT.pid"
}

# bench <label> <env...> -- <args...>: one measurement against a fresh redis-server.
bench() {
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  start_redis
  echo "run=$run $label $(env "${envs[@]}" timeout 40 "$BIN" "$1" "$2" --port "$PORT" "${@:3}" 2>&1 | tail -1)"
  stop_redis
}

has() { local s; for s in "${SECTIONS[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

for run in $(seq 1 "$RUNS"); do
  if has pipe; then # the backplane's shape: batches of 256 as one pipeline, one at a time
    for size in 2048 64; do for c in "${CANDIDATES[@]}"; do
      bench pipe FRED_BCAST=$BCAST -- throughput "$c" --size "$size" --secs "$SECS" --style pipe
    done; done
  fi
  if has window; then # each crate's own pipelining: 256 concurrent single PUBLISHes
    for size in 2048 64; do for c in "${CANDIDATES[@]}"; do
      [ "$c" = raw ] && continue
      bench window FRED_BCAST=$BCAST -- throughput "$c" --size "$size" --secs "$SECS" --style window
    done; done
  fi
  if has lossy && [[ " ${CANDIDATES[*]} " == *" fred "* ]]; then # fred as it comes
    for size in 2048 64; do
      bench lossy -- throughput fred --size "$size" --secs "$SECS" --style pipe
    done
  fi
  if has multi; then # one 2-worker multi-thread runtime for both sides, like the service
    for size in 2048 64; do for c in "${CANDIDATES[@]}"; do
      bench multi RT=multi FRED_BCAST=$BCAST -- throughput "$c" --size "$size" --secs "$SECS"
    done; done
  fi
  if has latency; then
    for size in 64 2048; do for c in "${CANDIDATES[@]}"; do
      bench latency FRED_BCAST=$BCAST -- latency "$c" --size "$size" --count "$COUNT"
    done; done
  fi
  if has idle; then
    for c in "${CANDIDATES[@]}"; do bench idle -- idle "$c"; done
    [[ " ${CANDIDATES[*]} " == *" fred "* ]] && bench idle FRED_BCAST=$BCAST -- idle fred
  fi
  if has reconnect; then # the binary runs its own redis-server here (it kills and restarts it)
    for c in "${CANDIDATES[@]}"; do
      [ "$c" = raw ] && continue
      for how in client-kill restart client-kill/100000; do
        PORT=$(free_port)
        channels=0
        [[ $how == */* ]] && channels=${how#*/} && how=${how%/*}
        echo "run=$run reconnect $(timeout 40 "$BIN" reconnect "$c" --port "$PORT" --how "$how" \
          --channels $((channels > 0 ? channels - 1 : 0)) --down-ms 1000 \
          --redis-server "$REDIS_SERVER" --dir "$WORK" 2>&1 | tail -1)"
      done
    done
    if [[ " ${CANDIDATES[*]} " == *" rs "* ]]; then
      # redis-rs when its reconnect retries run out while Redis is down (1 retry instead of 6).
      PORT=$(free_port)
      echo "run=$run reconnect-retries-exhausted $(RS_SUB_RETRIES=1 timeout 40 "$BIN" reconnect rs \
        --port "$PORT" --how restart --down-ms 1500 --redis-server "$REDIS_SERVER" --dir "$WORK" 2>&1 | tail -1)"
    fi
  fi
done

if has deps; then
  # Crates each candidate pulls in (deps/only-*: the candidate + tokio [+ rustls/ring for
  # redis-rs]), and a clean release build of each (-j2), timed.
  count() {
    cargo tree -p "$1" -e normal,build --prefix none --target x86_64-unknown-linux-gnu 2>/dev/null |
      sed 's/ (\*)//;s/ (proc-macro)//' | awk '{print $1" "$2}' | sort -u | grep -vc "^$1 "
  }
  cargo fetch -q
  for p in only-redis only-fred; do
    dir=${CARGO_TARGET_DIR:-target}/clean-$p
    rm -rf "$dir"
    start=$(date +%s.%N)
    CARGO_TARGET_DIR=$dir timeout 900 cargo build -q --release -j2 -p "$p"
    end=$(date +%s.%N)
    echo "deps $p crates=$(count "$p") clean_release_build_s=$(awk "BEGIN{printf \"%.0f\", $end - $start}")"
    rm -rf "$dir"
  done
fi
