#!/usr/bin/env bash
# The peers' venv (.venv-bench) for `make bench`: django-tasks-db and Celery, kept
# out of the app's requirements. Same interpreter choice as the app's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(scripts/find_python.sh)
if [ ! -x .venv-bench/bin/python ]; then "$python" -m venv .venv-bench; fi
.venv-bench/bin/python -m pip install -q --upgrade pip
.venv-bench/bin/python -m pip install -q -r bench/peers/requirements.txt
