#!/usr/bin/env bash
# Installs what fencelock's demo and tests need and that a fresh Debian or
# Ubuntu machine with Go may lack: redis-server, and PostgreSQL (the tests
# start private servers from its binaries; the SQL stores are tested on it).
# Idempotent; uses sudo when not root.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: please install: ${need[*]} (no apt-get on this machine)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "setup: installing ${need[*]}" >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >&2
# The packages may start system-wide servers (redis on 6379, PostgreSQL on
# 5432); fencelock's tests and demo start their own on free ports instead.
