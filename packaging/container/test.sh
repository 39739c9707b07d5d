#!/usr/bin/env bash
# Builds the container image from packaging/container/Containerfile with podman and checks
# what a user of it gets: a non-root process, 0.0.0.0 with the key from the environment (and
# a refusal without one), a HEALTHCHECK that passes on a live service and fails on a dead
# port, the official client connected, and a clean stop on SIGTERM (podman stop: exit 0, the
# client closed by the service, no SIGKILL).
#
# No registry is reachable here, so the Containerfile's base image is made locally by
# base-image.sh (debootstrap, imported under the FROM name) and the binary is the one cargo
# built on the host (--build-arg BINARIES=prebuilt): the recipe is the published one.
# podman from Debian, as root, set up by podman.sh.
#
# Usage: packaging/container/test.sh [--profile release|debug]   (default debug)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" -eq 0 ] || exec sudo --preserve-env=PATH "$0" "$@"
profile=debug
[ "${1:-}" = --profile ] && profile="$2"
[ -x "target/$profile/switchyard" ] || { echo "target/$profile/switchyard is missing (cargo build)"; exit 1; }
for tool in podman debootstrap runc; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install podman debootstrap runc)"; exit 1; }
done

failures=0
check() { # check DESCRIPTION COMMAND...: runs the command, says whether it held
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}

work=$(mktemp -d)
# shellcheck source=podman.sh
. packaging/container/podman.sh
image=localhost/switchyard:test
name=switchyard-test-$$
cleanup() {
  "$podman" rm -f -t 0 "$name" "$name-nokey" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== the base image"
packaging/container/base-image.sh "$podman"

echo "== podman build (BINARIES=prebuilt, PROFILE=$profile)"
# docker format: OCI images have no HEALTHCHECK.
"$podman" build --format docker --network host -f packaging/container/Containerfile \
  --build-arg BINARIES=prebuilt --build-arg PROFILE="$profile" -t "$image" . >"$work/build" 2>&1 || {
  cat "$work/build"
  exit 1
}
inspect() { "$podman" image inspect --format "$1" "$image"; }
check "the image runs as 10001:10001, not root" test "$(inspect '{{.Config.User}}')" = 10001:10001
check "it has a HEALTHCHECK" bash -c "[[ '$(inspect '{{json .Config.Healthcheck}}')' == *switchyard-healthcheck* ]]"
check "it listens on 0.0.0.0:8888 by default" bash -c "[[ '$(inspect '{{json .Config.Env}}')' == *SWITCHYARD_LISTEN=0.0.0.0:8888* ]]"
check "its entry point is the binary (PID 1, SIGTERM to it)" \
  test "$(inspect '{{json .Config.Entrypoint}}')" = '["/usr/bin/switchyard"]'

echo "== without a key"
status=0
"$podman" run --name "$name-nokey" --network host "$image" >"$work/nokey" 2>&1 || status=$?
check "it refuses to start on 0.0.0.0 with the Emulator's key (exit 2, saying why)" bash -c "
  [ $status -eq 2 ] && grep -q 'refusing to listen on non-loopback address 0.0.0.0' '$work/nokey'"

echo "== with a key (--network host)"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
key=$(head -c 32 /dev/urandom | base64)
endpoint=http://127.0.0.1:$port
"$podman" run -d --name "$name" --network host -e SWITCHYARD_ACCESS_KEY="$key" \
  -e SWITCHYARD_LISTEN="0.0.0.0:$port" -e SWITCHYARD_PUBLIC_ENDPOINT="$endpoint" "$image" \
  2>&1 | quiet >/dev/null
for _ in $(seq 100); do
  "$podman" logs "$name" 2>/dev/null | grep -q '^Listening on' && break
  sleep 0.1
done
"$podman" logs "$name" 2>&1 | sed -n 1,2p
check "the health check passes, and podman counts the container healthy" bash -c "
  $podman healthcheck run '$name' >/dev/null 2>&1 &&
  [ \"\$($podman inspect --format '{{.State.Health.Status}}' '$name')\" = healthy ]"
check "the health check fails where nothing listens" bash -c \
  "! $podman exec -e SWITCHYARD_LISTEN=127.0.0.1:1 '$name' /usr/local/bin/switchyard-healthcheck >/dev/null 2>&1"
pid=$("$podman" inspect --format '{{.State.Pid}}' "$name")
check "the service runs as uid 10001" test "$(ps -o uid= -p "$pid" | tr -d ' ')" = 10001

(cd packaging/test && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
check "the official client connects with the key from the environment and receives a REST send" \
  node packaging/test/smoke-client.mjs "$endpoint" "$key"
node packaging/test/smoke-client.mjs "$endpoint" "$key" --hold >"$work/held" &
held=$!
for _ in $(seq 100); do grep -q '^connected' "$work/held" && break; sleep 0.1; done

echo "== podman stop (SIGTERM)"
started=$(date +%s%N)
"$podman" stop -t 20 "$name" 2>&1 | quiet >/dev/null
stopped_ms=$((($(date +%s%N) - started) / 1000000))
wait "$held" || true
cat "$work/held"
exit_code=$("$podman" inspect --format '{{.State.ExitCode}}' "$name")
echo "stopped in $stopped_ms ms, exit code $exit_code"
check "SIGTERM stops it with exit code 0 (not SIGKILL's 137)" test "$exit_code" -eq 0
check "its client got the service's Close" grep -q '^closed by the service' "$work/held"
check "it logged the shutdown" bash -c "$podman logs '$name' 2>&1 | grep -q 'shutting down'"

echo
if [ "$failures" -ne 0 ]; then
  echo "container image: $failures checks failed"
  exit 1
fi
echo "container image: every check passed"
