#!/usr/bin/env bash
# What the tests need from Debian: a real OpenSSH sshd, a real headless Chromium, a real
# PostgreSQL server (initdb/pg_ctl, started by tests/postgres.py in a temp dir) and tmux
# (the `pivot chat` tests drive a real terminal with send-keys and capture-pane).
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
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
