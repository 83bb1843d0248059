#!/usr/bin/env bash
# Installs what `make bench-peers` needs from Debian's packages, when missing:
# redis-server (for asynq) and postgresql (for River). Non-interactive; uses
# sudo unless running as root. The bench starts its own servers on free
# loopback ports in a temporary directory: the system services these
# packages may start are not used.
set -euo pipefail

need=()
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
  need+=(redis-server)
fi
if ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
  need+=(postgresql)
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "bench-peers: need ${need[*]} (Debian packages) and sudo is missing: run as root: apt-get install ${need[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "bench-peers: installing ${need[*]} with apt-get" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
