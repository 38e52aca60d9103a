#!/usr/bin/env bash
# Installs podman, buildah and runc from Debian when missing. Idempotent.
set -euo pipefail
missing=()
for p in podman buildah runc; do command -v "$p" >/dev/null || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
echo "installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq podman buildah runc >/dev/null
