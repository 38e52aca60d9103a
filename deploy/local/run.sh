#!/usr/bin/env bash
# Runs the whole orderflow stack in the foreground for a demo: the two
# simulators, the payment reconciler, the split-worker and the gateway,
# built into ./bin by `make build`. Prints the page's URL and a dev token,
# and the operations page's URL and an admin token.
# Ctrl-C stops every process and exits 0.
set -uo pipefail
cd "$(dirname "$0")/../.."

# A laptop run: development secrets and the dev login are allowed here and
# refused by every service in production (the default).
export ORDERFLOW_ENV="${ORDERFLOW_ENV:-development}"
export ORDERFLOW_DEV_LOGIN="${ORDERFLOW_DEV_LOGIN:-true}"
export ORDERFLOW_LOG_LEVEL="${ORDERFLOW_LOG_LEVEL:-info}"
HTTP_ADDR="${ORDERFLOW_GATEWAY_HTTP_ADDR:-127.0.0.1:8080}"
ADMIN_ADDR="${ORDERFLOW_GATEWAY_ADMIN_ADDR:-127.0.0.1:9094}"

pids=()
stop() {
  trap - INT TERM
  echo; echo "stopping orderflow..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  echo "stopped"
  exit 0
}
trap stop INT TERM

start() {
  local name=$1
  if [ ! -x "bin/$name" ]; then
    echo "bin/$name is missing (run 'make build')" >&2
    return 1
  fi
  # Each line of a service's JSON log is prefixed with its name.
  ( exec "bin/$name" 2>&1 | sed -u "s/^/[$name] /" ) &
  pids+=($!)
}

for s in fulfilmentsim paysim reconciler splitworker gateway; do
  start "$s" || stop
done

for _ in $(seq 100); do
  curl -fsS "http://$HTTP_ADDR/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
token=$(curl -fsS -X POST "http://$HTTP_ADDR/v1/dev/login" -d '{"memberId":"demo"}' 2>/dev/null \
  | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
# An operator's token: the development sign-in grants the admin role.
admin_token=$(curl -fsS -X POST "http://$HTTP_ADDR/v1/dev/login" -d '{"memberId":"operator","roles":["admin"]}' 2>/dev/null \
  | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
cat <<TXT

  orderflow is running
  page:      http://$HTTP_ADDR/
  API docs:  http://$HTTP_ADDR/docs  (OpenAPI: http://$HTTP_ADDR/openapi.json)
  dev token (member "demo"):
    $token
  operations: http://$HTTP_ADDR/ops
  admin token (operator "operator", role admin; paste it on the operations page):
    $admin_token
  try:  curl -H "Authorization: Bearer \$TOKEN" http://$HTTP_ADDR/v1/tasks
  metrics:   http://$ADMIN_ADDR/metrics  (the gateway's admin port; split-worker ${ORDERFLOW_SPLITWORKER_HTTP_ADDR:-127.0.0.1:9092}, reconciler ${ORDERFLOW_RECONCILER_HTTP_ADDR:-127.0.0.1:9093})
    with the scrape token: curl -H "Authorization: Bearer ${ORDERFLOW_METRICS_TOKEN:-dev-metrics-token}" http://$ADMIN_ADDR/metrics
  JWT secret: ${ORDERFLOW_JWT_SECRET:-orderflow-dev-secret-change-me (dev default)}
  Ctrl-C stops everything.

TXT
wait
