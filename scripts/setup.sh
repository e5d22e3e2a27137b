#!/usr/bin/env bash
# Installs what fencelock's demo and tests need and that a fresh Debian or
# Ubuntu machine with Go may lack: redis-server, PostgreSQL (the tests
# start private servers from its binaries; the SQL stores are tested on it),
# and a headless Chromium (the dashboard's test drives the page in it).
# Idempotent; uses sudo when not root.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql)
fi
browser=no
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  command -v "$b" >/dev/null 2>&1 && browser=yes
done

if [ ${#need[@]} -eq 0 ] && [ $browser = yes ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  [ $browser = yes ] || need+=(chromium)
  echo "setup: please install: ${need[*]} (no apt-get on this machine)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -qq >&2
if [ $browser = no ]; then
  # Debian packages the browser as chromium; Ubuntu as chromium-browser.
  # (Not piped into grep -q: under pipefail, apt-cache's SIGPIPE would
  # fail the test.)
  policy=$(apt-cache policy chromium 2>/dev/null || true)
  if [[ $policy == *"Candidate: "[0-9]* ]]; then
    need+=(chromium)
  else
    need+=(chromium-browser)
  fi
fi
echo "setup: installing ${need[*]}" >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >&2
# The packages may start system-wide servers (redis on 6379, PostgreSQL on
# 5432); fencelock's tests and demo start their own on free ports instead.
