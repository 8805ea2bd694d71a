#!/usr/bin/env bash
# What the tests need from Debian: a real OpenSSH sshd, a real headless Chromium, a real
# PostgreSQL server (initdb/pg_ctl, started by tests/postgres.py in a temp dir) and tmux
# (the `pivot chat` tests drive a real terminal with send-keys and capture-pane), and Podman with
# runc (the container tests stage real containers; see tests/containers.py), and Prometheus
# Alertmanager (tests/alertmanager.py fires real alerts into `pivot serve`; Debian names its
# binary prometheus-alertmanager, and its postinst may not start the service: none is needed).
# Installs only what is missing, so repeated runs cost nothing.
set -euo pipefail
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v ps >/dev/null 2>&1 || need+=(procps)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || need+=(runc)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Podman as these machines can run it: runc (crun's cgroup v2 setup fails here), cgroupfs (no
# systemd), and no default ulimits (raising nofile beyond the sandbox's hard limit fails). With
# these, `--shm-size 64m` and `-m 256m` take effect as on a real Docker host.
conf=/etc/containers/containers.conf
if ! grep -q 'pivot: system-deps' "$conf" 2>/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO mkdir -p /etc/containers
  printf '%s\n' '# pivot: system-deps (scripts/system-deps.sh)' '[containers]' \
    'default_ulimits = []' '[engine]' 'runtime = "runc"' 'cgroup_manager = "cgroupfs"' \
    'events_logger = "file"' | $SUDO tee "$conf" >/dev/null
fi
