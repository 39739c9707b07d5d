#!/usr/bin/env bash
# Refreshes the third-party files the dashboard embeds (crates/node/assets/dashboard/vendor)
# from npm, at the versions pinned here: the official SignalR browser client and uPlot.
# Both are MIT-licensed; their notices are kept beside them (uPlot.LICENSE from its package;
# signalr.LICENSE by hand: the npm package ships none). THIRD-PARTY-NOTICES.md reproduces both:
# run scripts/third-party-notices.py after changing a version.
set -euo pipefail
cd "$(dirname "$0")/.."
SIGNALR_VERSION=10.0.11
UPLOT_VERSION=1.6.32
out=crates/node/assets/dashboard/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm init -y >/dev/null && npm install --no-audit --no-fund \
  "@microsoft/signalr@$SIGNALR_VERSION" "uplot@$UPLOT_VERSION" >/dev/null)
# The source-map comment would make browsers ask for a file the service does not serve.
sed '/^\/\/# sourceMappingURL=/d' "$work/node_modules/@microsoft/signalr/dist/browser/signalr.min.js" > "$out/signalr.min.js"
cp "$work/node_modules/uplot/dist/uPlot.iife.min.js" "$work/node_modules/uplot/dist/uPlot.min.css" "$out/"
cp "$work/node_modules/uplot/LICENSE" "$out/uPlot.LICENSE"
echo "vendored @microsoft/signalr $SIGNALR_VERSION and uplot $UPLOT_VERSION into $out"
