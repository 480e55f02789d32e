"""A PgBouncer in transaction mode in front of the test database's PostgreSQL server,
started and stopped by the tests that need it.

In that mode, PgBouncer's usual one, a client's transactions run on whichever server
session is free, so a session's state (an advisory lock, a ``SET``) outlives the
client's statement and is met by the next client handed that session. Used by
tests/maintenance/test_pgbouncer.py, and by ``DJQUEUE_TEST_BEHIND_PGBOUNCER=1``
(tests/conftest.py), which puts every process the tests start behind one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.servers import free_port, stop_process

#: The name of the variable that sends the processes the tests start through a pooler
#: (read by tests/settings.py).
PORT_VARIABLE = "DJQUEUE_TEST_DB_PORT"


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def running(settings: dict, pool_size: int) -> Iterator[int]:
    """A PgBouncer with ``pool_size`` server sessions before the server of Django's
    ``settings`` (a DATABASES entry); yields its port, and stops it."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        pytest.fail("PgBouncer is not installed (scripts/ensure_system.sh pgbouncer, "
                    "which make test runs, installs it)")
    user = settings["USER"] or "postgres"
    folder = Path(tempfile.mkdtemp(prefix="djqueue-pgbouncer-"))
    folder.chmod(0o777)  # PgBouncer will not run as root: it drops to nobody below
    port = free_port()
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n"
        "ignore_startup_parameters = extra_float_digits,options\n")
    for name in ("users.txt", "pgbouncer.ini"):
        (folder / name).chmod(0o644)
    command = [binary, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "nobody"]
    with (folder / "pgbouncer.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: process.poll() is not None or _answers(port), 30, "PgBouncer")
        assert process.poll() is None, (folder / "pgbouncer.log").read_text()
        yield port
    finally:
        stop_process(process, 10)
        shutil.rmtree(folder, ignore_errors=True)
