#!/usr/bin/env bash
# Release archives: one tarball per target, switchyard-<version>-<target>.tar.gz, holding
# bin/switchyard and bin/switchyard-bench, the README and docs, the project's licence, the
# licences of every crate built into the binaries, and the systemd unit; then SHA256SUMS over
# the tarballs (check with `sha256sum -c SHA256SUMS`).
#
# Usage: packaging/release/archive.sh [--target TRIPLE ...] [--profile release|debug]
#                                     [--out DIR] [--no-build]
#   --target   a Rust target triple, repeatable (default: this machine's); each is built with
#              cargo build --release --locked --target TRIPLE (its standard library must be
#              installed: rustup target add TRIPLE) unless --no-build
#   --profile  release (default) or debug; CI archives its debug build to test the recipe
#   --out      where the tarballs and SHA256SUMS go (default target/dist)
# Prints the path of each tarball, then of SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/../.."

targets=()
profile=release
out=target/dist
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=("$2"); shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "usage: $0 [--target TRIPLE ...] [--profile release|debug] [--out DIR] [--no-build]" >&2; exit 2 ;;
  esac
done
host=$(rustc -vV | sed -n 's/^host: //p')
[ ${#targets[@]} -gt 0 ] || targets=("$host")
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The licences are read from the crates' sources, which a build of another target may not
# have fetched.
cargo fetch --locked >/dev/null

archives=()
for target in "${targets[@]}"; do
  # The host's build is cargo's usual one (target/<profile>); another target's is in
  # target/<triple>/<profile>.
  flags=(--locked -p switchyard -p switchyard-bench)
  [ "$profile" = release ] && flags+=(--release)
  if [ "$target" = "$host" ]; then
    bin_dir=target/$profile
  else
    bin_dir=target/$target/$profile
    flags+=(--target "$target")
  fi
  [ "$build" -eq 0 ] || cargo build "${flags[@]}" >&2
  for binary in switchyard switchyard-bench; do
    [ -x "$bin_dir/$binary" ] || { echo "$bin_dir/$binary is missing" >&2; exit 1; }
  done
  name=switchyard-$version-$target
  root=$work/$name
  install -d "$root/bin" "$root/docs"
  install -m 0755 "$bin_dir/switchyard" "$bin_dir/switchyard-bench" "$root/bin/"
  # Stripped, as distributions ship binaries (the release profile keeps line tables for
  # profiling; a tarball need not carry them). Only the host's strip knows the host's format.
  [ "$target" != "$host" ] || strip --strip-unneeded "$root/bin/switchyard" "$root/bin/switchyard-bench"
  install -m 0644 README.md "$root/"
  (cd docs && find . -name '*.md' -exec install -D -m 0644 {} "$root/docs/{}" \;)
  install -D -m 0644 packaging/systemd/switchyard.service "$root/packaging/systemd/switchyard.service"
  # The project's licence and notices when the repository has them (LICENSE, a third-party
  # notices file); the crates' licences are generated for this target either way.
  for file in LICENSE LICENSE.md THIRD-PARTY-NOTICES.md THIRD-PARTY-NOTICES.txt; do
    if [ -f "$file" ]; then install -m 0644 "$file" "$root/"; fi
  done
  packaging/release/licenses.py --target "$target" --package switchyard --package switchyard-bench \
    >"$root/THIRD-PARTY-LICENSES.md"
  # Reproducible: sorted names, one owner, the last commit's time.
  mtime=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
    -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
  archives+=("$name.tar.gz")
  echo "$out/$name.tar.gz"
done
(cd "$out" && sha256sum "${archives[@]}" >SHA256SUMS)
echo "$out/SHA256SUMS"
