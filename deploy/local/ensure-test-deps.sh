#!/usr/bin/env bash
# Makes sure what the tests need beyond Redis and RabbitMQ (which
# ensure-deps.sh provides) is installed from Debian: headless Chromium at
# /usr/bin/chromium (the gateway's browser tests, services/gateway/browser),
# promtool (package prometheus; the chart's alert-rule tests), iptables
# (the fault suite's partitions and packet delay) and Node.js with npm (the
# WeChat Pay SDK interop test installs its pinned SDK with npm ci).
# `make test-deps` runs it; `make run` does not. Idempotent; installs
# nothing when everything is there.
set -euo pipefail

bash "$(dirname "$0")/ensure-commands.sh" chromium=chromium,fonts-liberation promtool=prometheus \
	iptables=iptables node=nodejs npm=npm
/usr/bin/chromium --version
