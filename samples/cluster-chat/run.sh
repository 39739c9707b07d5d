#!/usr/bin/env bash
# The serverless chat room on a three-node cluster in one command: Redis, three Switchyard
# nodes, nginx and the chat app in containers (packaging/compose/compose.yaml), with podman-compose
# or docker compose. The nodes' image is built from packaging/container/Containerfile (it pulls
# the Rust and Debian images). Ctrl-C stops the cluster; `... down` removes it.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${COMPOSE:-}" ]; then
  read -r -a compose <<<"$COMPOSE"
elif command -v podman-compose >/dev/null; then
  compose=(podman-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  echo "needs podman-compose (apt-get install podman-compose) or docker compose" >&2
  exit 1
fi
# The app's container runs server.mjs from this folder, with its node_modules.
(cd samples/serverless-chat && { [ -d node_modules/@microsoft/signalr ] || npm ci --no-audit --no-fund --loglevel=error; })
# A fresh key unless you give one; the app and the nodes get the same.
SWITCHYARD_ACCESS_KEY=${SWITCHYARD_ACCESS_KEY:-$(head -c 32 /dev/urandom | base64)}
export SWITCHYARD_ACCESS_KEY
echo "Chat room: http://localhost:${CHAT_PORT:-3000}/  (open it in two browser windows; the cluster is at http://localhost:${CLUSTER_PORT:-8888})"
exec "${compose[@]}" -f packaging/compose/compose.yaml up --build
