#!/usr/bin/env bash
# Installs from Debian what provides each missing command. Arguments are
# command=package[,package…], e.g. node=nodejs npm=npm. Idempotent;
# installs nothing when every command is there.
set -euo pipefail

missing=()
for arg in "$@"; do
	if ! command -v "${arg%%=*}" >/dev/null; then
		IFS=, read -ra pkgs <<<"${arg#*=}"
		missing+=("${pkgs[@]}")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
echo "installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
