#!/usr/bin/env bash
# Makes the Containerfile's base image on a machine that cannot pull from a registry: a Debian
# root file system from debootstrap (the minimal variant, slimmed as Debian's official "-slim"
# images are: no documentation, manual pages, locales or package caches), imported under the
# name the Containerfile's FROM uses, so the recipe that is tested is the one that is published.
# With a registry, `podman pull docker.io/library/debian:bookworm-slim` does the same job.
#
# Usage: packaging/container/base-image.sh [PODMAN...]
#   PODMAN: the podman command line to import with (default: podman); the test passes its own
#   storage and runtime options. Nothing happens when the image is there already.
# Needs root (debootstrap) and Debian's debootstrap package.
set -euo pipefail
cd "$(dirname "$0")"

podman=("$@")
[ ${#podman[@]} -gt 0 ] || podman=(podman)
suite=bookworm
name=docker.io/library/debian:$suite-slim
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if "${podman[@]}" image exists "$name"; then
  echo "$name is there already"
  exit 0
fi
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "debootstrap --variant=minbase $suite ($mirror)"
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  tail -20 "$rootfs.log"
  exit 1
}
rm -f "$rootfs.log"
# As the official image: the same apt sources, and dpkg told to leave out what a container
# does not read.
rm -f "$rootfs/etc/apt/sources.list"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/excludes" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
find "$rootfs/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
rm -rf "$rootfs"/usr/share/{man,info,locale}/* "$rootfs"/var/cache/apt/*.bin \
  "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
# mktemp made the folder 0700; as the image's / it must be 0755 for a user other than root.
chmod 0755 "$rootfs"
tar -C "$rootfs" --numeric-owner -c . | "${podman[@]}" import \
  --change 'CMD ["bash"]' --message "debootstrap $suite (minbase), slimmed" - "$name"
echo "imported $name"
