#!/usr/bin/env bash
# install-chromium.sh installs Debian's chromium package when no Chromium is
# on the PATH (or at $CMDQ_CHROMIUM), for the console's real-browser test
# (console/browser_test.go). It runs apt-get non-interactively, with sudo
# unless it runs as root. `make test` calls it; it does nothing when Chromium
# is already there.
set -euo pipefail

for c in "${CMDQ_CHROMIUM:-}" chromium chromium-browser google-chrome; do
	if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then
		echo "chromium: $(command -v "$c")"
		exit 0
	fi
done

if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-chromium.sh: no Chromium found and no apt-get to install it;" >&2
	echo "install Chromium and put it on the PATH, or set CMDQ_CHROMIUM to its path" >&2
	exit 1
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-chromium.sh: not root and no sudo: run 'apt-get install -y chromium' as root" >&2
		exit 1
	fi
	sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-chromium.sh: installing Debian's chromium package (apt-get)"
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends chromium
command -v chromium
