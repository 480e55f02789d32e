"""The distribution: a wheel built from this checkout installs into a fresh venv, and a
project that only adds ``djqueue`` to INSTALLED_APPS passes ``manage.py check``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.packaging


def run(*argv: object, cwd: Path | None = None, env: dict | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_wheel_installs_in_a_fresh_venv_and_a_bare_project_passes_check(tmp_path: Path):
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, ROOT,
        cwd=tmp_path)
    [wheel] = dist.glob("*.whl")
    assert wheel.name.startswith("django_djqueue-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("djqueue/apps.py", "djqueue/migrations/0001_initial.py",
                   "djqueue/storage/fastpath/__init__.py", "djqueue/fixtures/djqueue_admin_theme.json",
                   "djqueue/templates/admin/djqueue/dashboard.html"):
        assert needed in names
    assert not any(n.startswith(("tests/", "project/", "bench/")) for n in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Django as this suite runs it (a fresh venv on this Python gets the same series).
    import django

    series = ".".join(map(str, django.VERSION[:2]))
    extra = [] if django.VERSION >= (6,) else ["django-tasks"]
    run(python, "-m", "pip", "install", "-q", f"{wheel}", f"Django~={series}.0", *extra)

    project = tmp_path / "bare"
    project.mkdir()
    (project / "bare_settings.py").write_text(textwrap.dedent("""
        SECRET_KEY = "wheel-test"
        INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "djqueue"]
        DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                                 "NAME": "bare.sqlite3"}}
        USE_TZ = True
    """))
    env = {"DJANGO_SETTINGS_MODULE": "bare_settings", "PYTHONPATH": str(project),
           "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin"}
    # manage.py check passes: no error. (The bare project's SQLite starts transactions
    # DEFERRED, which djqueue's W002 points out: a warning, as it should be.)
    out = run(python, "-m", "django", "check", cwd=project, env=env)
    assert "ERRORS:" not in out and "djqueue.E" not in out, out
    run(python, "-m", "django", "migrate", "-v", "0", cwd=project, env=env)
    # The installed package is the wheel's, not this checkout.
    where = run(python, "-c", "import djqueue, sys; print(djqueue.__file__)", cwd=project, env=env)
    assert str(env_dir) in where
