#!/usr/bin/env bash
# Prints the path of the best Python for djqueue: >= 3.12 (Django 6.1), from PATH
# or pyenv's versions folder; else Python 3.11 (Django 5.2 LTS + django-tasks backport).
set -euo pipefail
if [ -n "${DJQUEUE_PYTHON:-}" ]; then  # an explicit choice, e.g. to test the 3.11 fallback
  command -v "$DJQUEUE_PYTHON"; exit 0
fi
candidates=(python3.13 python3.12)
roots=()
if command -v pyenv >/dev/null 2>&1; then roots+=("$(pyenv root)"); fi
roots+=("${PYENV_ROOT:-$HOME/.pyenv}")
for name in "${candidates[@]}"; do
  if command -v "$name" >/dev/null 2>&1 && "$name" -c 'import venv' 2>/dev/null; then
    command -v "$name"; exit 0
  fi
  for root in "${roots[@]}"; do
    for path in "$root"/versions/"${name#python}".*/bin/"$name"; do
      if [ -x "$path" ] && "$path" -c 'import venv' 2>/dev/null; then echo "$path"; exit 0; fi
    done
  done
done
for fallback in python3.11 python3; do
  if command -v "$fallback" >/dev/null 2>&1; then
    echo "djqueue: no Python >= 3.12 found; falling back to $("$fallback" --version 2>&1) with Django 5.2 LTS and the django-tasks backport." >&2
    command -v "$fallback"; exit 0
  fi
done
echo "djqueue: no usable Python 3.11+ found" >&2
exit 1
