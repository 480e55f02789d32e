"""The distribution: a wheel built from this checkout installs into a fresh venv, and a
project that only adds ``djqueue`` to INSTALLED_APPS passes ``manage.py check``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.packaging


def run(*argv: object, cwd: Path | None = None, env: dict | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


class Installed(NamedTuple):
    wheel: Path
    python: Path  # the fresh venv's, with the wheel and Django installed


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A wheel built from this checkout, installed in a fresh venv with Django as this
    suite runs it (a fresh venv on this Python gets the same series)."""
    import django

    where = tmp_path_factory.mktemp("wheel")
    dist = where / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, ROOT,
        cwd=where)
    [wheel] = dist.glob("*.whl")
    env_dir = where / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    series = ".".join(map(str, django.VERSION[:2]))
    extra = [] if django.VERSION >= (6,) else ["django-tasks"]
    run(python, "-m", "pip", "install", "-q", f"{wheel}", f"Django~={series}.0", *extra)
    return Installed(wheel, python)


def test_the_wheel_installs_in_a_fresh_venv_and_a_bare_project_passes_check(
        installed: Installed, tmp_path: Path):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    assert installed.wheel.name.startswith("django_djqueue-")
    for needed in ("djqueue/apps.py", "djqueue/migrations/0001_initial.py",
                   "djqueue/storage/fastpath/__init__.py", "djqueue/fixtures/djqueue_admin_theme.json",
                   "djqueue/templates/admin/djqueue/dashboard.html", "djqueue/py.typed"):
        assert needed in names
    assert not any(n.startswith(("tests/", "project/", "bench/")) for n in names)

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
           "PATH": f"{installed.python.parent}:/usr/bin:/bin"}
    # manage.py check passes: no error. (The bare project's SQLite starts transactions
    # DEFERRED, which djqueue's W002 points out: a warning, as it should be.)
    out = run(installed.python, "-m", "django", "check", cwd=project, env=env)
    assert "ERRORS:" not in out and "djqueue.E" not in out, out
    run(installed.python, "-m", "django", "migrate", "-v", "0", cwd=project, env=env)
    # The installed package is the wheel's, not this checkout.
    where = run(installed.python, "-c", "import djqueue; print(djqueue.__file__)", cwd=project,
                env=env)
    assert str(installed.python.parent.parent) in where


def test_a_projects_type_checker_reads_djqueues_annotations_from_the_wheel(
        installed: Installed, tmp_path: Path):
    """djqueue ships ``py.typed`` (PEP 561) and names its public API for type checkers:
    mypy, run on a project's code against the installed wheel, checks its calls with
    djqueue's own annotations."""
    pytest.importorskip("mypy", reason="mypy is installed on Python 3.12 and later")
    code = tmp_path / "uses_djqueue.py"
    code.write_text(textwrap.dedent("""
        import djqueue

        djqueue.send("emails", {"to": "a@example.com"}, priority="high")
    """))
    # Django's stubs are not in that venv: its imports are untyped there, djqueue's not.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports",
         "--python-executable", str(installed.python), str(code)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "missing library stubs or py.typed marker" not in done.stdout, done.stdout
    assert 'Argument "priority" to "send" has incompatible type "str"; expected "int"' in (
        done.stdout), done.stdout
