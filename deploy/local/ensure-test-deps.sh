#!/usr/bin/env bash
# Makes sure what the tests need beyond Redis and RabbitMQ (which
# ensure-deps.sh provides) is installed from Debian: headless Chromium at
# /usr/bin/chromium (the gateway's browser tests), promtool (package
# prometheus; the chart's alert-rule tests), iptables (the fault suite's
# partitions and packet delay) and Node.js with npm (the WeChat Pay SDK
# interop test, which installs its pinned SDK with npm ci). `make test-deps` runs it; `make run` does
# not. Idempotent; installs nothing when everything is there.
set -euo pipefail

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium fonts-liberation)
command -v promtool >/dev/null || missing+=(prometheus)
command -v iptables >/dev/null || missing+=(iptables)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
echo "installing ${missing[*]} (for the tests)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
/usr/bin/chromium --version
