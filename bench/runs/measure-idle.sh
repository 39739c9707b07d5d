#!/usr/bin/env bash
# Measures the real service's RSS per idle client connection.
#
# Builds release, starts `switchyard serve --listen 127.0.0.1:0`, reads its VmRSS, opens N real
# SignalR client connections with the `idle` example (negotiate → WebSocket → handshake, then
# idle, consuming pings), waits until all are connected and have been idle for SETTLE seconds,
# reads VmRSS again and prints (after - before) / established. Everything it starts is bounded
# in time and is stopped on exit.
#
# Usage: bench/runs/measure-idle.sh [CONNECTIONS]
# Environment (all optional):
#   CONNECTIONS=10000   connections in total (the first argument wins)
#   PROCESSES=auto      load-generator processes (auto: 1 up to 15,000 connections, else
#                       enough to keep each under 9,500 connections / file descriptors)
#   RATE=1000           new connections per second, all processes together
#   PROTOCOL=json       json | messagepack
#   SETTLE=10           seconds all connections stay idle before RSS is sampled
#   HOLD_EXTRA=10       seconds the generators keep holding after the sample (ping/drop check)
#   NO_BUILD=1          skip `cargo build`
#   KEEP_LOGS=1         keep the working directory with the service and generator logs
#   SERVICE_ARGS="..."  extra arguments for `switchyard serve`
#   IDLE_ARGS="..."     extra arguments for the idle example (e.g. "--user-prefix u")
set -euo pipefail

CONNECTIONS="${1:-${CONNECTIONS:-10000}}"
RATE="${RATE:-1000}"
PROTOCOL="${PROTOCOL:-json}"
SETTLE="${SETTLE:-10}"
HOLD_EXTRA="${HOLD_EXTRA:-10}"
PROCESSES="${PROCESSES:-auto}"
SERVICE_ARGS="${SERVICE_ARGS:-}"
IDLE_ARGS="${IDLE_ARGS:-}"

die() { echo "measure-idle: $*" >&2; exit 1; }
log() { echo "measure-idle: $*" >&2; }

[[ "$CONNECTIONS" =~ ^[0-9]+$ && "$CONNECTIONS" -gt 0 ]] || die "CONNECTIONS must be a positive integer"
if [[ "$PROCESSES" == auto ]]; then
    if (( CONNECTIONS <= 15000 )); then PROCESSES=1; else PROCESSES=$(( (CONNECTIONS + 9499) / 9500 )); fi
fi
(( PROCESSES >= 1 )) || die "PROCESSES must be >= 1"

# Every process here may hold at most 20,000 files; the service needs one per connection.
HARD_NOFILE="$(ulimit -Hn)"
if [[ "$HARD_NOFILE" == unlimited ]]; then NOFILE=20000; else NOFILE=$(( HARD_NOFILE < 20000 ? HARD_NOFILE : 20000 )); fi
ulimit -n "$NOFILE"
if (( CONNECTIONS + 200 > NOFILE )); then
    log "warning: $CONNECTIONS connections + overhead exceed the service's open-file limit ($NOFILE)"
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SERVICE_BIN="$TARGET_DIR/release/switchyard"
IDLE_BIN="$TARGET_DIR/release/examples/idle"

if [[ -z "${NO_BUILD:-}" ]]; then
    log "building release (switchyard + idle example)…"
    cargo build --release -p switchyard >&2
    cargo build --release -p switchyard-client --examples >&2
fi
[[ -x "$SERVICE_BIN" ]] || die "missing $SERVICE_BIN"
[[ -x "$IDLE_BIN" ]] || die "missing $IDLE_BIN"

WORK="$(mktemp -d /tmp/measure-idle.XXXXXX)"
SERVICE_PID=""
WATCHDOG_PID=""
GEN_PIDS=()

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    for pid in "${GEN_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    if [[ -n "$SERVICE_PID" ]] && kill -0 "$SERVICE_PID" 2>/dev/null; then
        kill -TERM "$SERVICE_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$SERVICE_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$SERVICE_PID" 2>/dev/null || true
    fi
    if [[ -n "$WATCHDOG_PID" ]]; then
        # The watchdog is a subshell running `sleep`: stop both, or the sleep lingers.
        local sleeper
        sleeper="$(pgrep -P "$WATCHDOG_PID" || true)"
        kill "$WATCHDOG_PID" 2>/dev/null || true
        [[ -n "$sleeper" ]] && kill $sleeper 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    if [[ -n "${KEEP_LOGS:-}" ]]; then
        log "logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
threads_of() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
fds_of() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

# Generous upper bound for the whole run; the watchdog ends the service after it.
RAMP_SECONDS=$(( CONNECTIONS / RATE + 60 ))
HOLD=$(( SETTLE + HOLD_EXTRA + 5 ))
MAX_SECONDS=$(( RAMP_SECONDS + HOLD + 120 ))

# --- service ---
SWITCHYARD_LOG="${SWITCHYARD_LOG:-warn}" "$SERVICE_BIN" serve --listen 127.0.0.1:0 $SERVICE_ARGS \
    >"$WORK/service.out" 2>"$WORK/service.err" &
SERVICE_PID=$!
( sleep "$MAX_SECONDS"; echo "measure-idle: watchdog: stopping the service after ${MAX_SECONDS}s" >&2; kill -KILL "$SERVICE_PID" 2>/dev/null ) &
WATCHDOG_PID=$!

PORT=""
for _ in $(seq 1 300); do
    PORT="$(sed -n 's/^Listening on .*:\([0-9][0-9]*\)$/\1/p' "$WORK/service.out" | head -n1)"
    [[ -n "$PORT" ]] && break
    kill -0 "$SERVICE_PID" 2>/dev/null || { cat "$WORK/service.err" >&2; die "service exited early"; }
    sleep 0.1
done
[[ -n "$PORT" ]] || die "no 'Listening on' line from the service within 30 s"
ENDPOINT="http://127.0.0.1:$PORT"
sleep 1
BEFORE_KB="$(rss_kb "$SERVICE_PID")"
log "service pid $SERVICE_PID on $ENDPOINT, VmRSS before: ${BEFORE_KB} kB, threads $(threads_of "$SERVICE_PID")"

# --- load generators ---
PER=$(( CONNECTIONS / PROCESSES ))
REM=$(( CONNECTIONS % PROCESSES ))
PROC_RATE=$(( (RATE + PROCESSES - 1) / PROCESSES ))
for i in $(seq 0 $(( PROCESSES - 1 ))); do
    n=$PER
    (( i < REM )) && n=$(( n + 1 ))
    timeout --kill-after=5 $(( RAMP_SECONDS + HOLD + 30 )) \
        "$IDLE_BIN" --endpoint "$ENDPOINT" --hub idle --connections "$n" --rate "$PROC_RATE" \
        --hold-seconds "$(( SETTLE + HOLD_EXTRA ))" --ramp-timeout "$RAMP_SECONDS" \
        --protocol "$PROTOCOL" --label "gen$i" $IDLE_ARGS >"$WORK/gen$i.out" 2>"$WORK/gen$i.err" &
    GEN_PIDS+=($!)
done
log "started $PROCESSES generator(s) for $CONNECTIONS connections at ${RATE}/s"

# Wait until every generator has finished its ramp.
deadline=$(( SECONDS + RAMP_SECONDS + 30 ))
while :; do
    done_count=0
    for i in $(seq 0 $(( PROCESSES - 1 ))); do
        grep -q "RAMP_DONE" "$WORK/gen$i.out" 2>/dev/null && done_count=$(( done_count + 1 ))
    done
    (( done_count == PROCESSES )) && break
    (( SECONDS < deadline )) || die "generators did not finish the ramp in time"
    for i in $(seq 0 $(( PROCESSES - 1 ))); do
        if ! kill -0 "${GEN_PIDS[$i]}" 2>/dev/null && ! grep -q RAMP_DONE "$WORK/gen$i.out"; then
            cat "$WORK/gen$i.out" "$WORK/gen$i.err" >&2
            die "generator $i exited before finishing its ramp"
        fi
    done
    sleep 0.5
done
ESTABLISHED=0
FAILED=0
for i in $(seq 0 $(( PROCESSES - 1 ))); do
    line="$(grep -m1 RAMP_DONE "$WORK/gen$i.out")"
    echo "$line" >&2
    e="$(sed -n 's/.*established=\([0-9]*\).*/\1/p' <<<"$line")"
    f="$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$line")"
    ESTABLISHED=$(( ESTABLISHED + e ))
    FAILED=$(( FAILED + f ))
done
(( ESTABLISHED > 0 )) || die "no connection was established"

# Idle for SETTLE seconds, sampling as we go.
log "all ramps done: established=$ESTABLISHED failed=$FAILED; idling ${SETTLE}s"
for s in $(seq 1 "$SETTLE"); do
    sleep 1
    if (( s % 2 == 0 || s == SETTLE )); then
        log "  t+${s}s VmRSS $(rss_kb "$SERVICE_PID") kB, fds $(fds_of "$SERVICE_PID")"
    fi
done
AFTER_KB="$(rss_kb "$SERVICE_PID")"
HWM_KB="$(hwm_kb "$SERVICE_PID")"
FDS="$(fds_of "$SERVICE_PID")"
THREADS="$(threads_of "$SERVICE_PID")"
BYTES_PER_CONN=$(( (AFTER_KB - BEFORE_KB) * 1024 / ESTABLISHED ))

# Let the generators finish their hold (they report drops and pings), then see what is freed.
for pid in "${GEN_PIDS[@]}"; do wait "$pid" || true; done
GEN_PIDS=()
PINGS=0
DROPPED=0
for i in $(seq 0 $(( PROCESSES - 1 ))); do
    line="$(grep -m1 SUMMARY "$WORK/gen$i.out" || echo "[gen$i] SUMMARY missing")"
    echo "$line" >&2
    grep ERROR "$WORK/gen$i.out" >&2 || true
    p="$(sed -n 's/.* pings=\([0-9]*\).*/\1/p' <<<"$line")"
    d="$(sed -n 's/.* dropped=\([0-9]*\).*/\1/p' <<<"$line")"
    PINGS=$(( PINGS + ${p:-0} ))
    DROPPED=$(( DROPPED + ${d:-0} ))
done
sleep 3
CLOSED_KB="$(rss_kb "$SERVICE_PID" || echo 0)"
CLOSED_FDS="$(fds_of "$SERVICE_PID")"
ERR_LINES="$(grep -c -E 'WARN|ERROR' "$WORK/service.err" || true)"
if (( ERR_LINES > 0 )); then
    log "service logged $ERR_LINES WARN/ERROR lines; first 10:"
    grep -E 'WARN|ERROR' "$WORK/service.err" | head -n 10 >&2
fi

echo "RESULT connections=$CONNECTIONS processes=$PROCESSES protocol=$PROTOCOL established=$ESTABLISHED failed=$FAILED dropped=$DROPPED pings=$PINGS rss_before_kb=$BEFORE_KB rss_after_kb=$AFTER_KB rss_hwm_kb=$HWM_KB service_fds=$FDS service_threads=$THREADS rss_after_close_kb=$CLOSED_KB fds_after_close=$CLOSED_FDS service_warn_error_lines=$ERR_LINES bytes_per_connection=$BYTES_PER_CONN"
