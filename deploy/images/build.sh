#!/usr/bin/env bash
# Builds one OCI image per service without a registry: static binaries
# built on the host (CGO_ENABLED=0, -trimpath), a local base image made from
# the host's CA certificates and tzdata (deploy/images/base), and each
# service's own Dockerfile with BINARY=prebuilt. Uses Docker when its daemon
# answers, otherwise podman (installed from Debian when missing).
#
#   deploy/images/build.sh [service ...]     (default: all five)
#
# Environment: IMAGE_REPO (orderflow), VERSION (git describe), ENGINE
# (docker or podman; detected when empty).
set -euo pipefail
cd "$(dirname "$0")/../.."

SERVICES=("$@")
[ ${#SERVICES[@]} -gt 0 ] || SERVICES=(gateway splitworker reconciler paysim fulfilmentsim)
IMAGE_REPO=${IMAGE_REPO:-orderflow}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/local/containers.conf}

if [ -z "${ENGINE:-}" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then ENGINE=docker
  else
    if ! command -v podman >/dev/null; then bash deploy/local/ensure-podman.sh; fi
    ENGINE=podman
  fi
fi

ts() { date -u +%H:%M:%S; }

# Static binaries for linux/amd64 (or the host's arch).
out=.cache/images/bin
mkdir -p "$out"
echo "$(ts) go build (static) ${SERVICES[*]}"
for s in "${SERVICES[@]}"; do
  (cd "services/$s" && CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags="-s -w" -o "../../$out/$s" "./cmd/$s")
done
# The smoke command the chart's `helm test` hook runs.
(cd pkg/testkit && CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags="-s -w" -o "../../$out/smoke" ./smoke/cmd/smoke)

# Base image from the host's certificates and time zones.
base_ctx=.cache/images/base
rm -rf "$base_ctx"
mkdir -p "$base_ctx/rootfs/etc/ssl/certs" "$base_ctx/rootfs/usr/share" "$base_ctx/rootfs/tmp"
cp /etc/ssl/certs/ca-certificates.crt "$base_ctx/rootfs/etc/ssl/certs/"
cp -r /usr/share/zoneinfo "$base_ctx/rootfs/usr/share/zoneinfo"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$base_ctx/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$base_ctx/rootfs/etc/group"
chmod 1777 "$base_ctx/rootfs/tmp"
cp deploy/images/base/Containerfile "$base_ctx/Containerfile"
base=localhost/$IMAGE_REPO/base:$VERSION
echo "$(ts) $ENGINE build $base"
$ENGINE build -q -f "$base_ctx/Containerfile" -t "$base" "$base_ctx" >/dev/null

for s in "${SERVICES[@]}"; do
  echo "$(ts) $ENGINE build $IMAGE_REPO/$s:$VERSION"
  $ENGINE build -q -f "services/$s/Dockerfile" \
    --build-arg BINARY=prebuilt --build-arg BASE_IMAGE="$base" \
    --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" --build-arg CREATED="$CREATED" \
    -t "$IMAGE_REPO/$s:$VERSION" . >/dev/null
done
echo "$(ts) $ENGINE build $IMAGE_REPO/smoke:$VERSION"
$ENGINE build -q -f deploy/images/smoke/Dockerfile \
  --build-arg BINARY=prebuilt --build-arg BASE_IMAGE="$base" \
  --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" --build-arg CREATED="$CREATED" \
  -t "$IMAGE_REPO/smoke:$VERSION" . >/dev/null
echo "$(ts) images:"
for s in base "${SERVICES[@]}" smoke; do
  $ENGINE image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "(^|/)$IMAGE_REPO/$s:$VERSION " | sed 's/^/  /'
done
