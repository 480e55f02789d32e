"""``djqueue``'s public names: loaded lazily at run time, and the same names imported for
type checkers and editors, which cannot follow the lazy map."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import djqueue

INIT = Path(djqueue.__file__)


def _imported_for_type_checkers() -> dict[str, str]:
    """name → module of each import in ``djqueue/__init__.py``'s ``if TYPE_CHECKING:``."""
    found: dict[str, str] = {}
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom) and imported.module
                for alias in imported.names:
                    found[alias.asname or alias.name] = imported.module
    return found


def test_type_checkers_see_every_public_name_from_where_it_loads():
    assert _imported_for_type_checkers() == djqueue._EXPORTS
    assert djqueue.__all__ == sorted(djqueue._EXPORTS)


def test_every_public_name_loads_as_the_object_its_module_defines():
    for name, module in djqueue._EXPORTS.items():
        assert getattr(djqueue, name) is getattr(import_module(module), name), name


def test_importing_djqueue_loads_nothing_of_django_before_setup():
    # The settings of a project name djqueue before Django is set up.
    done = subprocess.run(
        [sys.executable, "-c", "import sys, djqueue; "
         "print(sorted(m for m in sys.modules if m.startswith(('django', 'djqueue.'))))"],
        capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
