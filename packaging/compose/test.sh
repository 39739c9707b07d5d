#!/usr/bin/env bash
# The compose file for real: packaging/compose/compose.yaml started with Debian's
# podman-compose (Redis, three nodes built from the published Containerfile, nginx, the chat
# sample), checked (every node healthy, the nodes see each other, nginx answers), then the chat
# page in two Chromium pages on different nodes (samples/test/cluster.test.mjs), then a stop:
# every node exits 0 on SIGTERM.
#
# No registry is reachable here: the Debian base image comes from base-image.sh, the nodes'
# image from the Containerfile with the host's binary (BINARIES=prebuilt), and the official
# redis, nginx and node images the compose file names are stood in for by images built under
# those names from standins/ (Debian 12's redis-server and nginx, the host's Node.js 20).
#
# Usage: packaging/compose/test.sh [--profile release|debug]   (default debug)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" -eq 0 ] || exec sudo --preserve-env=PATH "$0" "$@"
profile=debug
[ "${1:-}" = --profile ] && profile="$2"
for tool in podman podman-compose debootstrap node; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install podman podman-compose debootstrap)"; exit 1; }
done

failures=0
check() { # check DESCRIPTION COMMAND...: runs the command, says whether it held
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

work=$(mktemp -d)
# shellcheck source=../container/podman.sh
. packaging/container/podman.sh
project=switchyard-compose-$$
compose=(podman-compose --podman-path "$podman" -p "$project" -f packaging/compose/compose.yaml)
cleanup() {
  "${compose[@]}" down -t 5 >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== images"
packaging/container/base-image.sh "$podman"
"$podman" build --format docker --network host -f packaging/container/Containerfile \
  --build-arg BINARIES=prebuilt --build-arg PROFILE="$profile" -t localhost/switchyard:latest . \
  >"$work/build" 2>&1 || { cat "$work/build"; exit 1; }
case "$(node --version)" in
  v20.*) ;;
  *) echo "the node stand-in takes the host's Node.js, which must be 20 (is $(node --version))"; exit 1 ;;
esac
standin() { # standin NAME CONTAINERFILE [CONTEXT]: builds a stand-in unless it is there
  "$podman" image exists "$1" && return 0
  echo "stand-in for $1 ($2)"
  "$podman" build --network host -f "$2" -t "$1" "${3:-$work}" >"$work/standin" 2>&1 ||
    { cat "$work/standin"; return 1; }
}
standin docker.io/library/redis:7-bookworm packaging/compose/standins/redis.Containerfile
standin docker.io/library/nginx:stable-bookworm packaging/compose/standins/nginx.Containerfile
mkdir -p "$work/node" && cp "$(command -v node)" "$work/node/node"
standin docker.io/library/node:20-bookworm-slim packaging/compose/standins/node.Containerfile "$work/node"
(cd samples/serverless-chat && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

echo "== podman-compose up"
CLUSTER_PORT=$(free_port)
CHAT_PORT=$(free_port)
SWITCHYARD_ACCESS_KEY=$(head -c 32 /dev/urandom | base64)
export CLUSTER_PORT CHAT_PORT SWITCHYARD_ACCESS_KEY
"${compose[@]}" up -d >"$work/up" 2>&1 || { cat "$work/up"; exit 1; }
up() { # up URL: 200 within a minute
  for _ in $(seq 300); do
    node -e "fetch('$1').then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))" && return 0
    sleep 0.2
  done
  return 1
}
check "nginx answers /api/health for the cluster" up "http://127.0.0.1:$CLUSTER_PORT/api/health"
check "the chat page is served" up "http://127.0.0.1:$CHAT_PORT/"
for node in node1 node2 node3; do
  check "$node's health check passes" "$podman" healthcheck run "${project}_${node}_1"
done
metrics() { # metrics NODE: its /metrics, read inside its container
  "$podman" exec "${project}_$1_1" bash -c \
    'exec 3<>/dev/tcp/127.0.0.1/8888; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3'
}
three_nodes() {
  for _ in $(seq 50); do
    [ "$(metrics "$1" | sed -n 's/^switchyard_cluster_nodes \([0-9]*\).*/\1/p')" = 3 ] && return 0
    sleep 0.2
  done
  return 1
}
for node in node1 node2 node3; do
  check "$node counts three live nodes" three_nodes "$node"
done

echo "== the chat page on the cluster, in Chromium"
(cd samples/test && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
check "two pages on different nodes chat, one leaves, the other sees it" \
  env CHAT_URL="http://localhost:$CHAT_PORT/" PODMAN="$podman" COMPOSE_PROJECT="$project" \
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 node --test --test-timeout=300000 samples/test/cluster.test.mjs

echo "== podman-compose stop (SIGTERM)"
"${compose[@]}" stop -t 20 >/dev/null 2>&1
for node in node1 node2 node3; do
  check "$node stopped with exit code 0" \
    test "$("$podman" inspect --format '{{.State.ExitCode}}' "${project}_${node}_1")" -eq 0
done

echo
if [ "$failures" -ne 0 ]; then
  echo "compose cluster: $failures checks failed"
  "${compose[@]}" logs 2>&1 | quiet | tail -60
  exit 1
fi
echo "compose cluster: every check passed"
