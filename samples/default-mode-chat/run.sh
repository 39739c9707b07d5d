#!/usr/bin/env bash
# The Default-mode chat room in one command: builds the service and this app server, starts
# the service (development mode, port 8888) and the app server (port 5000), and stops both on
# Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p switchyard -p switchyard-sample-default-mode-chat
target/release/switchyard serve &
service=$!
trap 'kill "$service" 2>/dev/null; wait "$service" 2>/dev/null' EXIT
# The development-mode connection string (the Emulator's publicly known key, loopback only).
target/release/default-mode-chat \
  --connection-string "Endpoint=http://127.0.0.1;Port=8888;AccessKey=ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH;Version=1.0;"
