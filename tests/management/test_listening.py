"""``djqueue_http`` and ``djqueue_metrics`` listen on each address ``--host`` names
(as uvicorn did when it bound its own); an address they cannot listen on is one line
naming it, and the sockets bound before it are closed. Real sockets."""

import re
import socket
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command

from djqueue.processes.listening_sockets import listening_sockets, urls

SERVERS = ["djqueue_http", "djqueue_metrics"]

pytestmark = pytest.mark.django_db  # the commands check their database as they start


@pytest.fixture
def taken() -> Iterator[list[socket.socket]]:
    """Sockets the test listens on, closed at its end."""
    sockets: list[socket.socket] = []
    yield sockets
    for held in sockets:
        held.close()


def listen(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    return socket.create_server((host, port), family=family)


@pytest.mark.parametrize("command", SERVERS)
def test_a_port_in_use_is_one_line_naming_it(command, taken):
    taken.append(listen(socket.AF_INET, "127.0.0.1", 0))
    port = taken[0].getsockname()[1]
    with pytest.raises(CommandError) as refused:
        call_command(command, "--port", str(port))
    assert str(refused.value) == f"Cannot listen on 127.0.0.1:{port}: Address already in use"


@pytest.mark.parametrize("command", SERVERS)
def test_a_host_names_the_address_it_could_not_listen_on_and_keeps_no_other(command, taken):
    """``""`` is every interface, IPv4 then IPv6: with the IPv6 one's port taken, the
    error names it, and the IPv4 socket bound before it is closed again."""
    taken.append(listen(socket.AF_INET6, "::", 0))  # IPv6 only (IPV6_V6ONLY)
    port = taken[0].getsockname()[1]
    with pytest.raises(CommandError) as refused:
        call_command(command, "--host", "", "--port", str(port))
    assert str(refused.value) == (f"Cannot listen on every interface's port {port}: "
                                  f"Address already in use (on [::]:{port})")
    taken.append(listen(socket.AF_INET, "0.0.0.0", port))  # free: none kept


def test_a_host_name_that_resolves_to_nothing_is_one_line():
    with pytest.raises(CommandError, match=r"^Cannot listen on no-such-host\.invalid:8001: "):
        call_command("djqueue_http", "--host", "no-such-host.invalid", "--port", "8001")


@pytest.mark.parametrize("command", SERVERS)
@pytest.mark.parametrize("host", [
    "a..b",  # an empty label
    "a" * 64 + ".example",  # a label past 63 characters
    "q\udcff",  # a byte no UTF-8 reads, as argv holds it
])
def test_a_host_no_resolver_reads_is_one_line(command, host):
    """Before, the resolver's UnicodeError from its IDNA codec was a traceback. The
    reason in brackets is Python's, and its words change between versions."""
    with pytest.raises(CommandError) as refused:
        call_command(command, "--host", host, "--port", "0")
    assert re.fullmatch(rf"Cannot listen on {re.escape(host)}:0: not a host name \(.+\)",
                        str(refused.value)), str(refused.value)


def test_port_0_is_one_free_port_on_every_address():
    listeners = listening_sockets("", 0)
    try:
        ports = {listener.getsockname()[1] for listener in listeners}
        assert [listener.family for listener in listeners] == [socket.AF_INET,
                                                               socket.AF_INET6]
        assert len(ports) == 1 and 0 not in ports
        (port,) = ports
        assert urls(listeners, "/metrics") == (f"http://0.0.0.0:{port}/metrics and "
                                               f"http://[::]:{port}/metrics")
        for family, host in [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]:
            with socket.create_connection((host, port), timeout=5) as connection:
                assert connection.family == family
    finally:
        for listener in listeners:
            listener.close()
