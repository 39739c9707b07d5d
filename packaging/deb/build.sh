#!/usr/bin/env bash
# Builds the Debian packages from binaries cargo has built: `switchyard` (the service, its
# systemd unit, the docs) and `switchyard-bench` (the load generator and Rust app server, a
# package of its own: it belongs on the machines that generate load, not beside the service).
# dpkg-deb only: no debhelper, no cargo-deb, so what the package holds is all in this folder.
#
# Usage: packaging/deb/build.sh [--profile release|debug] [--out DIR]
#   --profile  which cargo build to package (default release: cargo build --release --locked
#              -p switchyard -p switchyard-bench); CI packages its debug build to test the recipe
#   --out      where the .deb files go (default target/packages)
# Prints the path of each package built.
set -euo pipefail
cd "$(dirname "$0")/../.."

profile=release
out=target/packages
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--profile release|debug] [--out DIR]" >&2; exit 2 ;;
  esac
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
arch=$(dpkg --print-architecture)
maintainer=${DEB_MAINTAINER:-"Switchyard contributors <switchyard@localhost>"}
bin_dir=target/$profile
for binary in switchyard switchyard-bench; do
  [ -x "$bin_dir/$binary" ] || {
    echo "$bin_dir/$binary is missing: cargo build $([ "$profile" = release ] && echo --release) --locked -p switchyard -p switchyard-bench" >&2
    exit 1
  }
done
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The shared libraries a binary needs, as Debian dependencies (libc6 and libgcc-s1, versioned).
shlib_depends() {
  local binary="$1"
  if command -v dpkg-shlibdeps >/dev/null; then
    mkdir -p "$work/shlibs/debian"
    printf 'Source: switchyard\n\nPackage: switchyard\nArchitecture: any\n' >"$work/shlibs/debian/control"
    (cd "$work/shlibs" && dpkg-shlibdeps -O "$OLDPWD/$binary" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
  else
    echo "libc6, libgcc-s1"
  fi
}

# Stages a package's files: the binary (stripped, as Debian ships them), its copyright, the
# licences of the crates in it (packaging/release/licenses.py), docs.
stage() {
  local package="$1" root="$work/$1"
  install -d "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/doc/$package"
  install -m 0755 "$bin_dir/$package" "$root/usr/bin/$package"
  strip --strip-unneeded "$root/usr/bin/$package"
  {
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: switchyard"
    echo
    echo "Files: *"
    echo "Copyright: Switchyard contributors"
    echo "License: MIT"
    if [ -f LICENSE ]; then sed 's/^$/./; s/^/ /' LICENSE; fi
    echo
    echo "Comment: the licences of the Rust crates built into the binary, with their texts,"
    echo " are in /usr/share/doc/$package/THIRD-PARTY-LICENSES.md"
  } >"$root/usr/share/doc/$package/copyright"
  packaging/release/licenses.py --target "$(rustc -vV | sed -n 's/^host: //p')" --package "$package" \
    >"$root/usr/share/doc/$package/THIRD-PARTY-LICENSES.md" 2>/dev/null
  for file in THIRD-PARTY-NOTICES.md THIRD-PARTY-NOTICES.txt; do
    if [ -f "$file" ]; then install -m 0644 "$file" "$root/usr/share/doc/$package/"; fi
  done
}

# control, and the installed size dpkg shows.
control() {
  local package="$1" root="$work/$1" depends="$2" description="$3"
  local size
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  cat >"$root/DEBIAN/control" <<EOF
Package: $package
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends
Section: net
Priority: optional
Description: $description
EOF
}

build() {
  local package="$1" file="$out/${1}_${version}_${arch}.deb"
  # gzip: fast to build and to unpack; the package is a few MB either way.
  dpkg-deb --root-owner-group -Zgzip --build "$work/$package" "$file" >/dev/null
  echo "$file"
}

# The service.
stage switchyard
root="$work/switchyard"
install -d "$root/usr/lib/systemd/system" "$root/usr/share/doc/switchyard/docs"
install -m 0644 packaging/systemd/switchyard.service "$root/usr/lib/systemd/system/"
install -m 0644 README.md "$root/usr/share/doc/switchyard/"
find docs -name '*.md' -exec install -D -m 0644 {} "$root/usr/share/doc/switchyard/{}" \;
for script in postinst prerm postrm; do
  install -m 0755 "packaging/deb/$script" "$root/DEBIAN/$script"
done
control switchyard "$(shlib_depends "$bin_dir/switchyard"), adduser" \
  "real-time message service, wire-compatible with Azure SignalR Service
 Switchyard serves the official SignalR clients over WebSockets, Server-Sent Events
 and long polling, ASP.NET Core app servers over Azure's service protocol, the
 data-plane REST API and upstream webhooks, as one node or as a cluster on Redis.
 .
 This package runs it as a systemd service under its own user, with
 /etc/switchyard/switchyard.toml written on install with a key of its own."
build switchyard

# The load generator and Rust app server.
stage switchyard-bench
control switchyard-bench "$(shlib_depends "$bin_dir/switchyard-bench")" \
  "load generator for SignalR services (Azure SignalR Service's scenarios)
 switchyard-bench runs the scenarios of Azure SignalR Service's performance guide
 against Switchyard or any SignalR server, and serves a Rust app server for them."
build switchyard-bench
