#!/usr/bin/env bash
# Builds the release archive of this machine's target from cargo's build and checks it as a
# user would: SHA256SUMS verifies it (and catches a changed byte), a second build is the same
# to the byte, it holds the binaries, README, docs and the licence of every crate cargo links
# into them, and the extracted binary serves the official client.
#
# Usage: packaging/release/test.sh [--profile release|debug]   (default debug: what CI built)
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=debug
[ "${1:-}" = --profile ] && profile="$2"

failures=0
check() { # check DESCRIPTION COMMAND...: runs the command, says whether it held
  if "${@:2}"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}
work=$(mktemp -d)
service_pid=
cleanup() {
  [ -z "$service_pid" ] || kill "$service_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== the archive ($profile binaries)"
packaging/release/archive.sh --no-build --profile "$profile" --out "$work/dist" 2>"$work/licences"
packaging/release/archive.sh --no-build --profile "$profile" --out "$work/again" >/dev/null 2>&1
archive=$(cd "$work/dist" && ls switchyard-*.tar.gz)
name=${archive%.tar.gz}
check "SHA256SUMS verifies the archive" bash -c "cd '$work/dist' && sha256sum --quiet -c SHA256SUMS"
check "a second build is the same to the byte" cmp -s "$work/dist/$archive" "$work/again/$archive"
cp "$work/dist/$archive" "$work/dist/SHA256SUMS" "$work/again/"
printf '\x01' | dd of="$work/again/$archive" bs=1 seek=1000 conv=notrunc status=none
check "SHA256SUMS catches a changed byte" bash -c "cd '$work/again' && ! sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1"

tar -C "$work" -xzf "$work/dist/$archive"
root=$work/$name
check "it holds both binaries, the README, the docs, the unit and the crates' licences" bash -c "
  [ -x '$root/bin/switchyard' ] && [ -x '$root/bin/switchyard-bench' ] && [ -f '$root/README.md' ] &&
  [ -f '$root/docs/configuration.md' ] && [ -f '$root/packaging/systemd/switchyard.service' ] &&
  [ -s '$root/THIRD-PARTY-LICENSES.md' ]"
# DWARF is what stripping removes; .debug_gdb_scripts is a loaded section (a pointer to rustc's
# pretty-printers) that strip rightly keeps, so it is not counted.
check "the binaries are stripped" bash -c "! readelf -S '$root/bin/switchyard' | grep -Eq '\.debug_(info|line|str|abbrev)'"
# cargo tree is a second reading of the same graph: every crate it links into either binary
# must be in the licence table, with a licence text section naming it.
host=$(rustc -vV | sed -n 's/^host: //p')
cargo tree --locked --offline -e normal --target "$host" --prefix none --format '{p}' \
  -p switchyard -p switchyard-bench 2>/dev/null |
  sed -n 's/^\([^ ]*\) v\([^ ]*\).*/\1 \2/p' | grep -v '^switchyard' | sort -u >"$work/linked"
missing=0
while read -r crate version; do
  grep -q "^| $crate | $version |" "$root/THIRD-PARTY-LICENSES.md" || { echo "  not listed: $crate $version"; missing=$((missing + 1)); }
done <"$work/linked"
check "the licence table lists all $(wc -l <"$work/linked") third-party crates cargo tree names" test "$missing" -eq 0
check "it carries licence texts (MIT, Apache-2.0)" bash -c "
  grep -q 'Permission is hereby granted, free of charge' '$root/THIRD-PARTY-LICENSES.md' &&
  grep -q 'Apache License' '$root/THIRD-PARTY-LICENSES.md'"
sed 's/^/  /' "$work/licences"

echo "== the extracted binary"
key=$(head -c 32 /dev/urandom | base64)
SWITCHYARD_ACCESS_KEY=$key "$root/bin/switchyard" serve --listen 127.0.0.1:0 >"$work/stdout" 2>"$work/stderr" &
service_pid=$!
for _ in $(seq 100); do grep -q '^Listening on' "$work/stdout" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^Listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/stdout")
[ -n "$port" ] || { echo "the service did not start"; cat "$work/stderr"; exit 1; }
(cd packaging/test && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
check "the official client connects to it and receives a REST send" \
  node packaging/test/smoke-client.mjs "http://127.0.0.1:$port" "$key"
check "switchyard-bench runs" bash -c "'$root/bin/switchyard-bench' --help >/dev/null"
kill -TERM "$service_pid"
status=0
wait "$service_pid" || status=$?
service_pid=
check "SIGTERM stops it with exit status 0" test "$status" -eq 0

echo
if [ "$failures" -ne 0 ]; then
  echo "release archive: $failures checks failed"
  exit 1
fi
echo "release archive: every check passed"
