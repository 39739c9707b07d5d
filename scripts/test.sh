#!/usr/bin/env bash
# Runs the whole test suite and installs what it needs: Rust checks and tests, the dependency
# policy (cargo-deny), the end-to-end tests with the official JavaScript client, the browser
# tests (that client in headless Chromium, cross-origin), what users install (the Debian
# package, the container image, the release archive, a compose cluster), the chat samples in
# Chromium, and the third-party client compatibility tests. The summary at the end lists every
# suite with its count of tests, and a SKIPPED line for anything left out; its last line is the
# total, `tests: N passed, M failed`.
# Usage: scripts/test.sh            (everything; what CI runs)
#        SKIP_COMPAT=1 scripts/test.sh   (leave out tests/compat locally, e.g. without Java/Go)
#        SKIP_BROWSER=1 scripts/test.sh  (leave out tests/browser and the samples locally, e.g.
#                                         without Chromium)
#        SKIP_PACKAGES=1 scripts/test.sh (leave out packaging/ locally, e.g. without dpkg or root)
# A suite left out, or a test its runner skipped, shows as SKIPPED in the summary; with CI set
# (as .ci/run runs it) neither is allowed: a skip switch stops the run and a skipped test fails
# its suite.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
passed=0
failed=0
summary=()
skipped_lines=()
tests_passed=0
tests_failed=0
tests_skipped=0
logs=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-test.XXXXXX")
trap 'rm -rf "$logs"' EXIT

# The counts a suite's runner printed, as "passed failed skipped ignored", or nothing when it
# printed none. Skipped: a test the runner was told at run time not to run (node's skip and
# todo, pytest's, Go's and JUnit's skips); ignored: a Rust test marked #[ignore] in the source,
# with its reason there. Knows cargo test ("test result:" per test
# binary, summed), node --test (spec "ℹ pass N" or TAP "# pass N") and the compatibility
# suite's closing "N passed, M failed[, K skipped]".
counts() {
  python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
cargo = re.findall(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", text, re.M)
if cargo:
    passed, failed, ignored = (sum(int(c[i]) for c in cargo) for i in range(3))
    print(passed, failed, 0, ignored)
    sys.exit()
node = dict(re.findall(r"^(?:ℹ|#) (pass|fail|skipped|todo|cancelled) (\d+)$", text, re.M))
if node:
    get = lambda k: int(node.get(k, 0))
    print(get("pass"), get("fail") + get("cancelled"), get("skipped") + get("todo"), 0)
    sys.exit()
plain = re.findall(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$", text, re.M)
if plain:
    p, f, s = plain[-1]
    print(p, f, s or 0, 0)
PY
}

# run NAME COMMAND...: runs one suite, its output also kept for the summary's counts.
run() {
  local name="$1"; shift
  local log="$logs/$((passed + failed)).log"
  step "$name"
  local status=0
  "$@" 2>&1 | tee "$log" || status=$?
  local line p f s i
  read -r p f s i < <(counts "$log") || true
  if [ -n "${p:-}" ]; then
    line="$name: $p passed, $f failed, $s skipped"
    if [ "$i" -gt 0 ]; then line="$line, $i ignored"; fi
    tests_passed=$((tests_passed + p))
    tests_failed=$((tests_failed + f))
    tests_skipped=$((tests_skipped + s))
    if [ "$s" -gt 0 ]; then
      skipped_lines+=("SKIPPED: $s test(s) of $name (see its output)")
      # In CI a skipped test is a test that did not run: the suite fails.
      if [ -n "${CI:-}" ] && [ "$status" -eq 0 ]; then
        echo "$name: $s test(s) skipped, which CI does not allow"
        status=1
      fi
    fi
  else
    line="$name"
  fi
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    summary+=("ok      $line")
  else
    failed=$((failed + 1))
    summary+=("FAILED  $line")
  fi
}

# skip NAME WHY: a suite left out on purpose, locally only.
skip() {
  skipped_lines+=("SKIPPED: $1 ($2)")
}

# CI runs everything: a skip switch there is a mistake, not a choice (.ci/run clears them).
if [ -n "${CI:-}" ]; then
  for variable in SKIP_BROWSER SKIP_COMPAT SKIP_PACKAGES COMPAT_ONLY E2E_NO_CUTS; do
    if [ -n "${!variable:-}" ]; then
      echo "$variable is set: CI runs every suite (unset it)"
      exit 1
    fi
  done
fi

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
# Every relative link and #anchor in the Markdown files resolves (GitHub's anchor rules); the
# self-test first shows that the check catches dead files, anchors and line anchors.
# No product file over 800 lines, no function over 100 (150 in the bench), at most three kept
# whole with a reason (issue 27's limits, kept by CI rather than by memory).
run "file and function sizes (scripts/sizes.py)" python3 scripts/sizes.py
run "documentation links" bash -c 'python3 scripts/check-links.py --self-test && python3 scripts/check-links.py'

# Dependency policy (deny.toml): permissive licences, banned crates, no unlisted duplicate
# versions, crates.io only. Offline: cargo-deny reads Cargo.lock and the crates' manifests, so
# `cargo fetch` first brings every platform's crates from crates.io (a build fetches only this
# one's). Advisories need the RustSec database from GitHub and are left to the command in
# docs/development.md ("Dependencies").
CARGO_DENY_VERSION=0.20.2
dependency_policy() {
  if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]; then
    echo "installing cargo-deny $CARGO_DENY_VERSION (cargo install --locked)"
    cargo install --locked "cargo-deny@$CARGO_DENY_VERSION" || return 1
  fi
  cargo fetch --locked && cargo deny --offline --locked check licenses bans sources
}
run "dependency policy (cargo deny check licenses bans sources, offline)" dependency_policy
# THIRD-PARTY-NOTICES.md names every crate in Cargo.lock with its licence texts.
run "third-party notices up to date (scripts/third-party-notices.py --check)" python3 scripts/third-party-notices.py --check

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

# --no-fail-fast: one failing test binary must not hide whether the others pass (their counts
# are in the summary).
run "cargo test" cargo test --workspace --locked --no-fail-fast
run "fuzz corpora replayed on stable (no libFuzzer)" cargo test --manifest-path fuzz/Cargo.toml --locked --no-fail-fast
step "building the service, the bench app server and the Default-mode sample for the end-to-end tests"
cargo build -p switchyard -p switchyard-bench -p switchyard-sample-default-mode-chat --locked
run "end-to-end tests (@microsoft/signalr in Node)" bash -c 'cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error && npm test'

# What users install (docs/install.md), built from the binaries above and exercised for real:
# the Debian package (dpkg -i, the unit's ExecStart as its user, the official client, SIGTERM,
# dpkg --purge) and the container image (podman from Debian; the base image made with
# debootstrap), both as root, and the release archive. SKIP_PACKAGES=1 skips them, e.g. on a
# machine without dpkg.
packages_name="the Debian package, the container image and the release archive"
if [ -n "${SKIP_PACKAGES:-}" ]; then
  skip "$packages_name" "SKIP_PACKAGES is set"
else
  run "Debian package (build, install, run as the unit does, purge)" packaging/deb/test.sh --profile debug
  if ! need podman || ! need debootstrap; then
    step "installing podman and debootstrap (apt-get install podman debootstrap runc) for the container test"
    apt_install podman debootstrap runc || echo "podman is required by the container test"
  fi
  run "container image (podman build, run, health check, SIGTERM)" packaging/container/test.sh --profile debug
  run "the Debian package under systemd (booted in a container: hardening, journal, restart, stop)" \
    packaging/deb/systemd-test.sh --profile debug
  run "release archive (tarball, licences, SHA-256 sums, the binary inside)" packaging/release/test.sh --profile debug
fi

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
browser_name="browser tests (@microsoft/signalr in headless Chromium, cross-origin CORS)"
if [ -z "${SKIP_BROWSER:-}" ]; then
  run "$browser_name" browser_tests
else
  skip "$browser_name" "SKIP_BROWSER is set"
fi
# The chat samples (samples/), each started by its own one command and used in two Chromium
# pages; screenshots in target/sample-screenshots/.
sample_tests() {
  ensure_chromium && (
    export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
    (cd samples/serverless-chat && npm ci --no-audit --no-fund --loglevel=error) \
      && cd samples/test && npm ci --no-audit --no-fund --loglevel=error && npm test
  )
}
samples_name="chat samples in headless Chromium (serverless, Default mode)"
if [ -z "${SKIP_BROWSER:-}" ]; then
  run "$samples_name" sample_tests
else
  skip "$samples_name" "SKIP_BROWSER is set"
fi
# The compose cluster (packaging/compose) with the chat page on different nodes; as root.
compose_test() {
  ensure_chromium || return 1
  if ! need podman-compose; then
    echo "installing podman-compose (apt-get install podman-compose) for the compose test"
    apt_install podman-compose || return 1
  fi
  packaging/compose/test.sh --profile debug
}
compose_name="compose cluster (3 nodes, Redis, nginx) with the chat sample in Chromium"
if [ -z "${SKIP_PACKAGES:-}" ] && [ -z "${SKIP_BROWSER:-}" ]; then
  run "$compose_name" compose_test
else
  skip "$compose_name" "SKIP_PACKAGES or SKIP_BROWSER is set"
fi
# Through bash, so a lost exec bit cannot drop the suite; a missing script fails it.
compat_name="client compatibility tests (Python, Go, Java clients)"
if [ -z "${SKIP_COMPAT:-}" ]; then
  run "$compat_name" bash tests/compat/run.sh
  if [ -n "${COMPAT_ONLY:-}" ]; then
    skip "the compatibility suites other than $COMPAT_ONLY" "COMPAT_ONLY is set"
  fi
else
  skip "$compat_name" "SKIP_COMPAT is set"
fi
if [ -n "${E2E_NO_CUTS:-}" ]; then
  skip "the stateful-reconnect tests' connection resets" "E2E_NO_CUTS is set"
fi

echo
echo "==> summary"
printf '%s\n' "${summary[@]}"
if [ "${#skipped_lines[@]}" -gt 0 ]; then
  printf '%s\n' "${skipped_lines[@]}"
fi
echo "suites: $passed passed, $failed failed, ${#skipped_lines[@]} skipped"
echo "tests: $tests_passed passed, $tests_failed failed, $tests_skipped skipped"
[ "$failed" -eq 0 ]
