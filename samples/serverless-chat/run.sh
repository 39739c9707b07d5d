#!/usr/bin/env bash
# The serverless chat room in one command: installs the sample's one dependency (the official
# client, whose browser bundle the page loads), then starts the app and a service (start.mjs).
set -euo pipefail
cd "$(dirname "$0")"
[ -d node_modules/@microsoft/signalr ] || npm ci --no-audit --no-fund --loglevel=error
exec node start.mjs
