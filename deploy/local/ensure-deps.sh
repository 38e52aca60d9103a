#!/usr/bin/env bash
# Makes sure the Redis and RabbitMQ that orderflow's tests and `make run`
# use answer (installs the Debian packages when missing and starts local
# servers when nothing answers). What only the tests need is
# ensure-test-deps.sh's. Idempotent.
set -euo pipefail

REDIS_HOST=127.0.0.1
REDIS_PORT=6379
AMQP_PORT=5672

apt_updated=0
install() {
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  if [ "$apt_updated" = 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Redis
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "installing redis-server"; install redis-server redis-tools
fi
if ! redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  echo "starting redis-server on $REDIS_PORT"
  mkdir -p /tmp/orderflow-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
    --appendonly no --dir /tmp/orderflow-redis --logfile /tmp/orderflow-redis/redis.log
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping >/dev/null

# RabbitMQ
if ! command -v rabbitmq-server >/dev/null; then
  echo "installing rabbitmq-server"; install rabbitmq-server
fi
if ! port_open 127.0.0.1 "$AMQP_PORT"; then
  echo "starting rabbitmq-server"
  rabbitmq-server -detached
  for _ in $(seq 120); do port_open 127.0.0.1 "$AMQP_PORT" && break; sleep 0.5; done
  rabbitmqctl await_startup >/dev/null 2>&1 || true
fi
port_open 127.0.0.1 "$AMQP_PORT" || { echo "RabbitMQ does not answer on $AMQP_PORT" >&2; exit 1; }

echo "redis and rabbitmq are up"
