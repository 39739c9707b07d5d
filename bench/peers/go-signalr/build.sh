#!/usr/bin/env bash
# Builds the go-signalr bench peer.
#   bench/peers/go-signalr/build.sh [OUT_DIR]
# OUT_DIR defaults to target/peers and, when relative, is taken relative to
# the repository root. The binary is written to OUT_DIR/go-signalr.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$script_dir/../../.." && pwd)"

out_dir="${1:-target/peers}"
case "$out_dir" in
  /*) ;;
  *) out_dir="$repo_root/$out_dir" ;;
esac

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: go is not installed (need Go >= 1.23)" >&2
  exit 1
fi

mkdir -p "$out_dir"
cd "$script_dir"
go build -trimpath -o "$out_dir/go-signalr" .
echo "built $out_dir/go-signalr"
