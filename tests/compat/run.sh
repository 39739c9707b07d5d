#!/usr/bin/env bash
# Third-party SignalR client compatibility tests: Python (signalrcore, pysignalr), Go
# (philippseith/signalr) and Java (com.microsoft.signalr), each against a real switchyard.
#
# Sets up what it needs (service binary if missing, Python venv, Go modules, Maven
# dependencies; all cached between runs), runs every suite, and ends with the line
# `N passed, M failed` (`, K skipped` when anything was skipped). Exit status 1 on any
# failure, and on any test a runner skipped: a skipped test is one that did not run.
#
# Environment:
#   TEST_SWITCHYARD_BIN     service binary (default: <repo>/target/debug/switchyard)
#   COMPAT_BUILD=1     run `cargo build -p switchyard` even if the binary exists
#   COMPAT_ONLY=python,go,java   run only these suites (comma-separated; the others print
#                      SKIPPED lines); for local runs, .ci/run clears it
#   SWITCHYARD_LOG     service log level (default warn)
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REPORTS="$HERE/.reports"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"

export TEST_SWITCHYARD_BIN="${TEST_SWITCHYARD_BIN:-$ROOT/target/debug/switchyard}"
export SWITCHYARD_LOG="${SWITCHYARD_LOG:-warn}"

PASSED=0
FAILED=0
SKIPPED=0
# Suites COMPAT_ONLY left out: reported, not counted as skipped tests.
LEFT_OUT=()
START=$(date +%s)

say() { printf '\n== %s\n' "$*"; }

case ",${COMPAT_ONLY:-python,go,java}," in
    *,python,* | *,go,* | *,java,*) ;;
    *) echo "COMPAT_ONLY=$COMPAT_ONLY names no suite (python, go, java)"; echo "0 passed, 1 failed"; exit 1 ;;
esac
want() {
    if [ -z "${COMPAT_ONLY:-}" ] || [[ ",$COMPAT_ONLY," == *",$1,"* ]]; then
        return 0
    fi
    LEFT_OUT+=("$1")
    return 1
}

# Adds a suite's counts; a suite that ran no test but failed counts as one failure.
record() { # name passed failed skipped rc
    local name=$1 p=$2 f=$3 s=$4 rc=$5
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "$name: exited with $rc without a failing test (setup or runner error): counted as 1 failure"
    elif [ $((p + f + s)) -eq 0 ]; then
        f=1
        echo "$name: ran no test: counted as 1 failure"
    fi
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
    SKIPPED=$((SKIPPED + s))
    echo "$name: $p passed, $f failed, $s skipped"
}

# --- service binary -------------------------------------------------------------
if [ "${COMPAT_BUILD:-0}" = "1" ] || [ ! -x "$TEST_SWITCHYARD_BIN" ]; then
    say "building switchyard (cargo build -p switchyard)"
    if ! (cd "$ROOT" && cargo build -p switchyard); then
        echo "cargo build failed"
        echo "0 passed, 1 failed"
        exit 1
    fi
fi
if [ ! -x "$TEST_SWITCHYARD_BIN" ]; then
    echo "service binary not found: $TEST_SWITCHYARD_BIN"
    echo "0 passed, 1 failed"
    exit 1
fi

# --- Python ---------------------------------------------------------------------
if want python; then
    say "python: signalrcore, pysignalr"
    t0=$(date +%s)
    PY="$HERE/python"
    rc=0
    VENV_PY=$("$PY/setup_venv.sh") || rc=1
    p=0 f=0 s=0
    if [ "$rc" -eq 0 ]; then
        (cd "$PY" && timeout 300 "$VENV_PY" -m pytest -q -p no:cacheprovider \
            --junitxml="$REPORTS/python.xml")
        rc=$?
        if [ -f "$REPORTS/python.xml" ]; then
            read -r p f s < <(python3 - "$REPORTS/python.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
t = sum(int(x.get("tests", 0)) for x in suites)
f = sum(int(x.get("failures", 0)) + int(x.get("errors", 0)) for x in suites)
s = sum(int(x.get("skipped", 0)) for x in suites)
print(t - f - s, f, s)
EOF
)
        fi
    fi
    record python "$p" "$f" "$s" "$rc"
    echo "python: $(( $(date +%s) - t0 ))s"
fi

# --- Go -------------------------------------------------------------------------
if want go; then
    say "go: github.com/philippseith/signalr"
    t0=$(date +%s)
    p=0 f=0 s=0 rc=0
    if command -v go >/dev/null; then
        (cd "$HERE/go" && timeout 300 go test -count=1 -v -timeout 240s ./...) > "$REPORTS/go.log" 2>&1
        rc=$?
        grep -E '^(--- (PASS|FAIL|SKIP)|FAIL|ok|PASS)' "$REPORTS/go.log" || true
        if [ "$rc" -ne 0 ]; then
            echo "--- go test output (failed) ---"
            cat "$REPORTS/go.log"
        fi
        p=$(grep -cE '^\s*--- PASS' "$REPORTS/go.log")
        f=$(grep -cE '^\s*--- FAIL' "$REPORTS/go.log")
        s=$(grep -cE '^\s*--- SKIP' "$REPORTS/go.log")
    else
        echo "go not found on PATH"
        rc=1
    fi
    record go "$p" "$f" "$s" "$rc"
    echo "go: $(( $(date +%s) - t0 ))s"
fi

# --- Java -----------------------------------------------------------------------
if want java; then
    say "java: com.microsoft.signalr"
    t0=$(date +%s)
    p=0 f=0 s=0 rc=0
    if command -v mvn >/dev/null; then
        rm -rf "$HERE/java/target/surefire-reports"
        (cd "$HERE/java" && timeout 400 mvn -q -B -Dstyle.color=never test)
        rc=$?
        shopt -s nullglob
        reports=("$HERE"/java/target/surefire-reports/TEST-*.xml)
        shopt -u nullglob
        if [ "${#reports[@]}" -gt 0 ]; then
            read -r p f s < <(python3 - "${reports[@]}" <<'EOF'
import sys, xml.etree.ElementTree as ET
t = f = s = 0
for path in sys.argv[1:]:
    r = ET.parse(path).getroot()
    t += int(r.get("tests", 0))
    f += int(r.get("failures", 0)) + int(r.get("errors", 0))
    s += int(r.get("skipped", 0))
print(t - f - s, f, s)
EOF
)
        fi
    else
        echo "mvn not found on PATH"
        rc=1
    fi
    record java "$p" "$f" "$s" "$rc"
    echo "java: $(( $(date +%s) - t0 ))s"
fi

say "total $(( $(date +%s) - START ))s"
for suite in "${LEFT_OUT[@]}"; do
    echo "SKIPPED: the $suite suite (COMPAT_ONLY=$COMPAT_ONLY)"
done
if [ "$SKIPPED" -gt 0 ]; then
    echo "SKIPPED: $SKIPPED test(s) skipped by their runner: the run fails (every test must run)"
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
else
    echo "$PASSED passed, $FAILED failed"
fi
[ "$FAILED" -eq 0 ] && [ "$SKIPPED" -eq 0 ]
