#!/usr/bin/env bash
# The whole test suite: lint, system checks, migrations check, then two lanes side
# by side: (1) pytest on MariaDB, part of the suite on MySQL, then Django 5.2 LTS on
# MariaDB; (2) pytest on PostgreSQL (when reachable) and its three reruns, then
# SQLite, then the wheel in a fresh venv. Then the fault scenarios' short forms, on a
# private MariaDB (tests/faults), in whichever lane ends first.
#
# Why two lanes: the suite waits more than it computes (its processes start, poll,
# sleep out leases and ticks); measured on the 2-core machine, the MariaDB run left
# the cores 47 % idle. The lanes share no database (MariaDB and MySQL / PostgreSQL and
# SQLite; the fault scenarios have a private MariaDB) and no fixed port (the fault
# scenarios' server listens on 3307; the partition and replica tests' servers, in
# lane 1, on 3311-3313 and 3321-3322), so what one runs cannot change what the other
# checks; lane 2's output is printed when it ends. The fault scenarios go
# to the lane that ends first, because which one that is changes from run to run:
# lane 1 was the longer by 240-290 s in two clean-clone runs of 2026-11-30, lane 2 by
# about 230 s in the run of 2026-12-02 (3,161 s of steps against 2,859 s and a venv).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
MARIADB_URL=${DJQUEUE_MARIADB_URL:-mysql://root@127.0.0.1:3306/test}
POSTGRES_URL=${DJQUEUE_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}

scripts/ensure_system.sh mariadb postgres spark browser prometheus pgbouncer faketime mysql || exit 1
# The suite starts many Python processes (workers, reapers, servers, commands). Where
# the environment says not to write bytecode (as CI's and many Docker images' do), each
# of them compiled djqueue's, the project's and the tests' modules from source again:
# 0.18 s of CPU and about 0.4 s a start on the 2-core machine. Written once, as the
# first process imports them, they are read from then on.
unset PYTHONDONTWRITEBYTECODE

failed=()
step() {
  local name=$1; shift
  echo; echo "=== $name"
  local started=$SECONDS
  # In the background and waited for, so that a stopping signal's trap (below) runs at
  # once: bash runs a trap only after the foreground command it is waiting on returns.
  "$@" & local pid=$!
  if wait "$pid"; then echo "--- $name: ok ($((SECONDS - started))s)"; else failed+=("$name"); echo "--- $name: FAILED"; fi
}
# pytest's exit code 5 (nothing selected, e.g. by -k) is not a failure.
none_selected_ok() { "$@"; local rc=$?; [ $rc -eq 5 ] && return 0; return $rc; }
# env(1) for shell functions too: with_env NAME=VALUE ... command [arguments]
with_env() ( while [[ $1 == *=* ]]; do export "$1"; shift; done; "$@" )
# tests/faults/test_faults.py runs once, in its own step: it starts a private MariaDB.
suite() { DATABASE_URL=$1 "$PY" -m pytest -p no:cacheprovider -q --durations=15 \
  --ignore=tests/faults/test_faults.py --ignore=tests/packaging "${@:2}"; }

step "ruff" .venv/bin/ruff check .
step "lint-imports (the layering, pyproject.toml)" .venv/bin/lint-imports --no-cache
step "no import cycle among djqueue's modules" "$PY" scripts/check_import_cycles.py
# The type check runs where Django 6.1 and its stubs are installed (not on the 3.11 fallback).
if [ -x .venv/bin/mypy ]; then
  step "mypy (pyproject.toml)" .venv/bin/mypy --cache-dir var/mypy-cache
else
  echo "mypy is not installed (the Python 3.11 fallback): the type check is skipped."
fi
step "mkdocs build --strict" env NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet
step "manage.py check" "$PY" manage.py check --fail-level WARNING
step "makemigrations --check" "$PY" manage.py makemigrations --check --dry-run
step "HTTP API reference matches its schema" "$PY" scripts/http_reference.py --check
step "manage.py check --database (MariaDB)" env DATABASE_URL="$MARIADB_URL" "$PY" manage.py check --database default --fail-level WARNING

# Lane 2, in the background: PostgreSQL, SQLite, the wheel (and the fault scenarios, if
# it ends first).
lane2_log=$(mktemp); lane2_failed=$(mktemp)
lane2() {
  failed=()
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    step "pytest on PostgreSQL" suite "$POSTGRES_URL" "$@"
    # The API's and the storage layer's SQL again, with Django's server-side binding.
    postgres_again "server-side binding" SERVER_SIDE_BINDING "tests/api tests/storage" "$@"
    # The processes' tests again, every worker, reaper and supervisor they start
    # connecting through a PgBouncer in transaction mode (tests/pgbouncer.py).
    postgres_again "processes behind PgBouncer" BEHIND_PGBOUNCER \
      "tests/worker tests/maintenance tests/task_backend" "$@"
    # The storage layer, the API and the workers through Django's own connection pool,
    # and the start-up check (which connects without the pool, to see a refusal).
    postgres_again "Django's connection pool" DJANGO_POOL \
      "tests/storage tests/api tests/worker tests/test_database_ready.py" "$@"
  else
    echo "PostgreSQL is not reachable on 127.0.0.1:5432: its run is skipped."
  fi
  step "pytest on SQLite" suite "" "$@"
  step "wheel in a fresh venv" wheel "$@"
  faults_if_first "$@"
  # At least one line (an empty one when all passed): an empty file means lane 2 died.
  printf '%s\n' "${failed[@]}" > "$lane2_failed"
}
# A step that runs the PostgreSQL suite's quicker tests of some folders again with one
# of tests/settings.py's switches on (DJQUEUE_TEST_<SWITCH>=1):
# postgres_again "what is different" SWITCH "FOLDER ..." [pytest's arguments]
postgres_again() {
  local what=$1 switch=$2 folders=$3; shift 3
  # $folders unquoted: one argument a folder.
  step "pytest on PostgreSQL, $what (${folders// /, })" with_env DATABASE_URL="$POSTGRES_URL" \
    "DJQUEUE_TEST_$switch=1" none_selected_ok "$PY" -m pytest -p no:cacheprovider -q \
    -m "not slow" $folders "$@"
}
# The fault scenarios' short forms: they start a private MariaDB and use no other
# database (no DATABASE_URL: the main MariaDB is lane 1's, PostgreSQL lane 2's).
faults() {
  DATABASE_URL="" none_selected_ok "$PY" -m pytest -p no:cacheprovider -q \
    --durations=10 tests/faults/test_faults.py "$@"
}
# Run by each lane as it ends; only the first gets past mkdir (atomic), so the
# scenarios run once, in the lane that ended first.
faults_taken=$(mktemp -u)
faults_if_first() {
  if mkdir "$faults_taken" 2>/dev/null; then
    step "fault scenarios (short forms; a private MariaDB on port 3307)" faults "$@"
  fi
}
on_mysql() {
  none_selected_ok "$PY" -m tests.mysql_server -p no:cacheprovider -q -m "not slow" \
    tests/storage tests/api tests/worker tests/task_backend tests/monitoring tests/http \
    tests/admin "$@"
}
# The wheel, built and installed in a fresh venv, in a bare project (once: no database).
wheel() { none_selected_ok "$PY" -m pytest -p no:cacheprovider -q tests/packaging "$@"; }
echo; echo "=== lane 2 (PostgreSQL, SQLite, the wheel) started beside lane 1; its output follows lane 1's"
lane2 "$@" > "$lane2_log" 2>&1 &
lane2_pid=$!
# A stopped run stops both lanes and their running steps at once (see step).
trap 'trap - INT TERM; kill 0' INT TERM
trap 'rm -f "$lane2_log" "$lane2_failed"; rmdir "$faults_taken" 2>/dev/null' EXIT

# Lane 1: MariaDB, MySQL, Django 5.2 LTS.
step "pytest on MariaDB" suite "$MARIADB_URL" "$@"
# MySQL, which is not MariaDB: the storage layer, the API, the workers, the
# django.tasks backend, the statistics, the HTTP API and the admin on a MySQL server
# started for the step (tests/mysql_server.py). The HTTP API and the admin since an
# admin action MySQL alone refused (error 1093) passed on MariaDB.
step "pytest on MySQL (tests/storage, tests/api, tests/worker, tests/task_backend, tests/monitoring, tests/http, tests/admin)" on_mysql "$@"

# Django 5.2 LTS with the django-tasks backport, when a Python 3.11 is at hand
# and the main venv is not already that fallback.
py311=$(command -v python3.11 || ls "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.11.*/bin/python3.11 2>/dev/null | head -1 || true)
if [ -n "$py311" ] && "$PY" -c 'import django, sys; sys.exit(django.VERSION < (6,))'; then
  step "venv with Django 5.2 LTS" make -s venv VENV=.venv-django52 DJQUEUE_PYTHON="$py311"
  step "pytest on MariaDB, Django 5.2 LTS" env DATABASE_URL="$MARIADB_URL" \
    .venv-django52/bin/python -m pytest -p no:cacheprovider -q -m "not slow and not spark" \
    --ignore=tests/faults/test_faults.py --ignore=tests/packaging "$@"
else
  echo "No second Python for Django 5.2 LTS (or already on it): that run is skipped."
fi
faults_if_first "$@"

wait "$lane2_pid"
echo; echo "=== lane 2's output"; cat "$lane2_log"
if [ -s "$lane2_failed" ]; then
  while read -r name; do [ -n "$name" ] && failed+=("$name"); done < "$lane2_failed"
else
  failed+=("lane 2 (it ended before its last step)")
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"; exit 1
fi
echo "All checks passed."
