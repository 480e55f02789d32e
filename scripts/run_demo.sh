#!/usr/bin/env bash
# The demo: migrate the database (SQLite in var/ unless DATABASE_URL is set),
# create the demo admin, sample messages and an HTTP API token, then run the web
# admin and HTTP API (uvicorn), a worker
# and the reaper until Ctrl-C, which stops them all (the worker gracefully).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PORT=${PORT:-8000}
echo "djqueue demo on ${DATABASE_URL:-SQLite (var/djqueue.sqlite3)} with $($PY --version)"
"$PY" manage.py migrate --noinput -v0
"$PY" manage.py demo_setup

pids=()
stop() {
  trap - INT TERM EXIT
  echo; echo "Stopping the web server, worker and reaper..."
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT
# Served over ASGI (uvicorn): the admin, the metrics and the HTTP API with its long polls.
"$PY" manage.py djqueue_http --port "$PORT" & pids+=($!)
"$PY" manage.py djqueue_worker default emails reports events flaky --concurrency 4 & pids+=($!)
"$PY" manage.py djqueue_reaper & pids+=($!)
echo "Web admin: http://127.0.0.1:$PORT/admin/ (Ctrl-C stops everything)"
echo "Prometheus metrics: http://127.0.0.1:$PORT/metrics"
wait -n "${pids[@]}"
