#!/usr/bin/env bash
# Runs the performance matrix of docs/performance.md on this machine: every scenario at
# Unit1 (1,000 connections), Unit10 (10,000) and the most one service process holds here
# (19,000: a process may have at most 20,000 open files), step-up runs for throughput,
# and the same against the Go peer (bench/peers/go-signalr). Reports (JSON), charts (SVG)
# and Azure-style counters go to OUT_DIR; one summary line per run goes to stdout.
#
#   bench/runs/matrix.sh [OUT_DIR] [ONLY]     # ONLY: a regex of run names to run, e.g. 'echo'
#
# Everything runs on 127.0.0.1, bounded in time; each run starts and stops its own
# service, app server and peer.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-target/bench-matrix}
ONLY=${2:-.}
mkdir -p "$OUT"
ulimit -n 20000 || { echo "needs ulimit -n 20000" >&2; exit 2; }
cargo build --release --locked -q -p switchyard -p switchyard-bench || exit 2
bench/peers/go-signalr/build.sh target/peers >/dev/null || exit 2
BENCH=target/release/switchyard-bench
SERVICE=(--service-bin target/release/switchyard)
PEER=(--peer-bin target/peers/go-signalr --target-name go-signalr)

# run NAME TARGET SCENARIO ARGS…: one bounded run, its files named after NAME.
run() {
  local name=$1 target=$2 scenario=$3; shift 3
  [[ $name =~ $ONLY ]] || return 0
  local tflags=("${SERVICE[@]}")
  [[ $target == peer ]] && tflags=("${PEER[@]}")
  timeout 900 "$BENCH" "$scenario" "${tflags[@]}" "$@" --quiet \
    --summary-json "$OUT/$name.json" --chart "$OUT/$name.svg" --counters "$OUT/$name.jsonl" \
    >"$OUT/$name.txt" 2>"$OUT/$name.err"
  local code=$?
  python3 - "$OUT/$name.json" "$name" "$code" <<'PY'
import json, sys
path, name, code = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"{name}: no report (exit {code}): {e}"); sys.exit()
last = r.get("last_passing_step")
s = r["steps"][last - 1] if last else (r["steps"][-1] if r["steps"] else {})
svc = s.get("service") or r.get("service") or {}
print(f"{name}: exit {code} conns {r['connections']} step {last}/{len(r['steps'])} "
      f"in/s {s.get('inbound_per_s', 0):.0f} out/s {s.get('outbound_per_s', 0):.0f} "
      f"p50 {s.get('p50_ms', 0):.2f} p99 {s.get('p99_ms', 0):.2f} max {s.get('max_ms', 0):.1f} ms "
      f"lost {r['lost']} dup {r['duplicated']} reord {r['reordered']} failed {r['connections_failed']} "
      f"svc cores {svc.get('cores', 0):.2f} rss {svc.get('rss_kb', 0)} kB "
      f"us/deliv {s.get('service_cpu_us_per_delivery') or 0:.1f} "
      f"conn/s {r.get('connects_per_s') or 0:.0f} rss/conn {r.get('service_rss_per_connection_bytes') or 0:.0f} "
      f"unit {r.get('azure_unit')}", flush=True)
PY
}

FIXED=(-d 20s --drain 5s --connect-rate 4000)
for target in switchyard peer; do
  for n in 1000 10000 19000; do
    w=1; [[ $n -gt 1000 ]] && w=2
    common=(-c "$n" -w "$w" --source-addresses 127.0.0.1,127.0.0.2 "${FIXED[@]}")
    run "$target-echo-$n" "$target" echo "${common[@]}"
    run "$target-broadcast-$n" "$target" broadcast "${common[@]}" -s 2
    run "$target-small-group-$n" "$target" send-to-group "${common[@]}" --group-size 10 -s $((n / 5))
    run "$target-big-group-$n" "$target" send-to-group "${common[@]}" --groups 10 -s 20
    run "$target-send-to-connection-$n" "$target" send-to-connection "${common[@]}"
    run "$target-rest-broadcast-$n" "$target" rest-broadcast "${common[@]}" -s 2
    run "$target-rest-send-to-user-$n" "$target" rest-send-to-user "${common[@]}" -s $((n / 5))
    run "$target-join-leave-group-$n" "$target" join-leave-group "${common[@]}"
    run "$target-idle-$n" "$target" idle -c "$n" -w "$w" --source-addresses 127.0.0.1,127.0.0.2 -d 10s --drain 0s --connect-rate 4000
    run "$target-connect-rate-$n" "$target" connect-rate -c "$n" -w "$w" --source-addresses 127.0.0.1,127.0.0.2 -d 1s --drain 0s --connect-rate 12000 --max-connecting 512
  done
  # Throughput: step up until Azure's rule fails (15 s per step).
  STEP=(-d 15s --drain 5s --connect-rate 4000 --source-addresses 127.0.0.1,127.0.0.2)
  run "$target-max-echo" "$target" echo -c 10000 -w 2 --send-interval 200ms --steps 5 "${STEP[@]}"
  run "$target-max-broadcast" "$target" broadcast -c 1000 -s 200 --steps 5 "${STEP[@]}"
  run "$target-max-small-group" "$target" send-to-group -c 10000 -w 2 --group-size 10 --send-interval 500ms --steps 5 "${STEP[@]}"
  run "$target-max-send-to-connection" "$target" send-to-connection -c 10000 -w 2 --send-interval 200ms --steps 5 "${STEP[@]}"
  run "$target-max-rest-broadcast" "$target" rest-broadcast -c 1000 -s 200 --steps 5 "${STEP[@]}"
  run "$target-max-rest-send-to-user" "$target" rest-send-to-user -c 10000 -w 2 -s 10000 --send-interval 500ms --steps 5 "${STEP[@]}"
done
