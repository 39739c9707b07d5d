#!/usr/bin/env bash
# Runs the whole test suite and installs what it needs: Rust checks and tests, the end-to-end
# tests with the official JavaScript client, and the third-party client compatibility tests.
# Usage: scripts/test.sh            (everything)
#        SKIP_COMPAT=1 scripts/test.sh   (skip tests/compat, e.g. on a machine without Java/Go)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
passed=0
failed=0
failures=()
run() {
  local name="$1"; shift
  step "$name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
  fi
}

need() { command -v "$1" >/dev/null 2>&1; }

step "checking tools"
need cargo || { echo "cargo is required (https://rustup.rs)"; exit 1; }
need node || { echo "node (>= 20) is required"; exit 1; }
need npm || { echo "npm is required"; exit 1; }

run "cargo fmt --check" cargo fmt --all -- --check
run "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
run "cargo test" cargo test --workspace --locked
run "fuzz corpora replayed on stable (no libFuzzer)" cargo test --manifest-path fuzz/Cargo.toml --locked
step "building the service and the bench app server for the end-to-end tests"
cargo build -p switchyard -p switchyard-bench --locked
run "end-to-end tests (@microsoft/signalr in Node)" bash -c 'cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error && npm test'
if [ -z "${SKIP_COMPAT:-}" ] && [ -x tests/compat/run.sh ]; then
  run "client compatibility tests (Python, Go, Java clients)" tests/compat/run.sh
fi

echo
echo "suites: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
  exit 1
fi
