"""The peers djqueue is measured against, run from their own venv (.venv-bench)."""
