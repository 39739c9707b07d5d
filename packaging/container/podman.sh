# Sourced by the container and compose tests: podman from Debian as this machine can run it
# (runc, cgroupfs, vfs storage under target/podman, kept between runs so that base images are
# made once per checkout; a containers.conf with default_ulimits = []). Defines $podman, one
# command with those options (for scripts, checks and podman-compose's --podman-path), and
# needs $work, a scratch folder, and the repository as the current folder.
store=$PWD/target/podman
mkdir -p "$store"
cat >"$store/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF=$store/containers.conf
podman=$work/podman
printf '#!/bin/sh\nexec podman --root "%s/root" --runroot "%s/run" --storage-driver vfs --runtime runc --cgroup-manager cgroupfs "$@"\n' \
  "$store" "$store" >"$podman"
chmod +x "$podman"
# Without systemd podman logs that it cannot schedule health checks by timer (the tests run
# them by hand); filter those lines out of what they show.
quiet() { grep -v 'systemd connection\|failed to connect to syslog' || true; }
