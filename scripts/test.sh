#!/usr/bin/env bash
# Runs the whole test suite and installs what it needs: Rust checks and tests, the dependency
# policy (cargo-deny), the end-to-end tests with the official JavaScript client, the browser
# tests (that client in headless Chromium, cross-origin), and the third-party client
# compatibility tests.
# Usage: scripts/test.sh            (everything)
#        SKIP_COMPAT=1 scripts/test.sh   (skip tests/compat, e.g. on a machine without Java/Go)
#        SKIP_BROWSER=1 scripts/test.sh  (skip tests/browser, e.g. on a machine without Chromium)
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
# crates/bench/tests/scenarios.rs builds the Go peer (bench/peers/go-signalr) with it.
need go || { echo "go is required (the benchmark's Go peer is built and run by cargo test)"; exit 1; }
need python3 || { echo "python3 is required (scripts/module-cycles.py)"; exit 1; }

run "cargo fmt --check" cargo fmt --all -- --check
run "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
run "cargo clippy (node with the fuzzing entry points)" cargo clippy -p switchyard-node --features fuzzing --all-targets --locked -- -D warnings
# Every crate's files form layers: no import cycle between files, none between top-level modules.
run "module layering (no import cycles)" bash -c 'python3 scripts/module-cycles.py crates/* && python3 scripts/module-cycles.py --parent-edges --top-level crates/*'

# Dependency policy (deny.toml): permissive licences, banned crates, no unlisted duplicate
# versions, crates.io only. Offline: cargo-deny reads Cargo.lock and the crates' manifests, so
# `cargo fetch` first brings every platform's crates from crates.io (a build fetches only this
# one's). Advisories need the RustSec database from GitHub and are left to the README's command.
CARGO_DENY_VERSION=0.20.2
dependency_policy() {
  if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]; then
    echo "installing cargo-deny $CARGO_DENY_VERSION (cargo install --locked)"
    cargo install --locked "cargo-deny@$CARGO_DENY_VERSION" || return 1
  fi
  cargo fetch --locked && cargo deny --offline --locked check licenses bans sources
}
run "dependency policy (cargo deny check licenses bans sources, offline)" dependency_policy

# Debian packages, as root or through sudo; `apt-get update` once per run.
apt_updated=0
apt_install() {
  local as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    need sudo || { echo "installing $* needs root or sudo"; return 1; }
    as_root=(sudo)
  fi
  if [ "$apt_updated" -eq 0 ]; then
    "${as_root[@]}" apt-get update -qq || return 1
    apt_updated=1
  fi
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# The cluster tests start real redis-server processes (Debian's redis-server package).
if ! need redis-server; then
  step "installing redis-server (apt-get install redis-server) for the cluster tests"
  apt_install redis-server || { echo "redis-server is required by the cluster tests"; exit 1; }
fi

# The cluster end-to-end tests put a real nginx (round-robin, no sticky sessions) before the nodes.
if ! need nginx && [ ! -x /usr/sbin/nginx ]; then
  step "installing nginx (apt-get install nginx-light) for the cluster end-to-end tests"
  apt_install nginx-light || { echo "nginx is required by the cluster end-to-end tests"; exit 1; }
fi

# The TLS end-to-end tests make their CA and certificate with the openssl CLI.
if ! need openssl; then
  step "installing openssl (apt-get install openssl) for the TLS end-to-end tests"
  apt_install openssl || { echo "openssl is required by the TLS end-to-end tests"; exit 1; }
fi

# crates/node/tests/metrics.rs has a real Prometheus (Debian's prometheus package) scrape a node;
# TEST_REQUIRE_PROMETHEUS makes that test fail, not skip, when it is missing.
if ! need prometheus && [ ! -x /usr/bin/prometheus ]; then
  step "installing prometheus (apt-get install prometheus) for the metrics test"
  apt_install prometheus || { echo "prometheus is required by the metrics test"; exit 1; }
fi
export TEST_REQUIRE_PROMETHEUS=1

run "cargo test" cargo test --workspace --locked
run "fuzz corpora replayed on stable (no libFuzzer)" cargo test --manifest-path fuzz/Cargo.toml --locked
step "building the service and the bench app server for the end-to-end tests"
cargo build -p switchyard -p switchyard-bench --locked
run "end-to-end tests (@microsoft/signalr in Node)" bash -c 'cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error && npm test'

# Chromium from the distribution's package (Debian: `chromium`), as root or through sudo.
# playwright-core drives it; nothing may download a browser of its own.
ensure_chromium() {
  if [ -n "${CHROMIUM_PATH:-}" ] || need chromium || need chromium-browser; then return 0; fi
  echo "installing Chromium (apt-get install chromium) for the browser tests"
  apt_install chromium || { echo "chromium is missing (or set CHROMIUM_PATH)"; return 1; }
}
browser_tests() {
  ensure_chromium && (
    cd tests/browser \
      && export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 \
      && npm ci --no-audit --no-fund --loglevel=error \
      && npm test
  )
}
if [ -z "${SKIP_BROWSER:-}" ]; then
  run "browser tests (@microsoft/signalr in headless Chromium, cross-origin CORS)" browser_tests
fi
if [ -z "${SKIP_COMPAT:-}" ] && [ -x tests/compat/run.sh ]; then
  run "client compatibility tests (Python, Go, Java clients)" tests/compat/run.sh
fi

echo
echo "suites: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
  exit 1
fi
