# Shared by bench/runs/cluster.sh and bench/runs/units.sh (sourced, not run): the release binaries,
# and `run NAME ARGS…`, which waits for a quiet machine, runs one switchyard-bench scenario
# into "$out/NAME.json" and "$out/NAME.txt" (bounded by `timeout`), and prints the lines
# matching "$summary" (or the report's tail when none match).
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ulimit -n 20000
# CARGO_TARGET_DIR, when set, is where cargo builds (and so where the binaries are).
bin=${CARGO_TARGET_DIR:-target}/release/switchyard
bench=${CARGO_TARGET_DIR:-target}/release/switchyard-bench
[ -x "$bin" ] && [ -x "$bench" ] || cargo build --release -p switchyard -p switchyard-bench
S=(--service-bin "$bin")

# A compiler running beside a benchmark makes its numbers the machine's: wait until none
# has run for 10 s.
quiet_machine() {
  local calm=0
  while [ "$calm" -lt 10 ]; do
    if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then calm=0; else calm=$((calm + 1)); fi
    sleep 1
  done
}

run() {
  local name=$1
  shift
  quiet_machine
  echo "=== $name: $* [load $(cut -d" " -f1-3 /proc/loadavg)]"
  timeout "${run_timeout:-600}" "$bench" "$@" --quiet --summary-json "$out/$name.json" >"$out/$name.txt" 2>&1 || true
  grep -E "$summary" "$out/$name.txt" || tail -5 "$out/$name.txt"
}
