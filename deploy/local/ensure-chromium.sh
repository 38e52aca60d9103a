#!/usr/bin/env bash
# Makes sure headless Chromium (Debian's `chromium` package, at
# /usr/bin/chromium) is installed for the gateway's browser tests.
# Idempotent; installs nothing when it is already there.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
echo "installing chromium (browser tests)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  chromium fonts-liberation >/dev/null
/usr/bin/chromium --version
