#!/usr/bin/env bash
# The peers' venv (.venv-bench) for `make bench`: bench/peers/requirements.txt, kept out
# of the app's requirements. Same interpreter choice as the app's venv. Its stamp,
# .venv-bench/.installed, tells bench/common.py's peer_python() it is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(scripts/find_python.sh)
if [ ! -x .venv-bench/bin/python ]; then "$python" -m venv .venv-bench; fi
.venv-bench/bin/python -m pip install -q --upgrade pip
.venv-bench/bin/python -m pip install -q -r bench/peers/requirements.txt
touch .venv-bench/.installed
