"""``djqueue_http`` and ``djqueue_metrics`` listen on each address ``--host`` names
(as uvicorn did when it bound its own); an address they cannot listen on is one line
naming it, and the sockets bound before it are closed. Real sockets."""

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from djqueue.processes.listening_sockets import listening_sockets, urls

SERVERS = ["djqueue_http", "djqueue_metrics"]
ROOT = Path(__file__).resolve().parents[2]

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


#: Run by root in a network namespace of its own (``unshare -n``), whose loopback is up
#: and whose free ports are 40000-40003: listen on every interface's port 0 with the
#: ports argv names in use on IPv6 alone, print the ports found or the refusal.
IN_A_NAMESPACE = """
import json, socket, sys
from djqueue.processes.listening_sockets import CannotListen, listening_sockets
in_use = [socket.create_server(("::", int(port)), family=socket.AF_INET6)
          for port in sys.argv[1:]]
try:
    listeners = listening_sockets("", 0)
except CannotListen as refused:
    print(json.dumps({"refused": str(refused)}))
else:
    print(json.dumps({"ports": [[listener.family.name, listener.getsockname()[1]]
                                for listener in listeners]}))
    for listener in listeners:
        listener.close()
# No socket is left: every port of the range binds again, on both.
for family, host in [(socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")]:
    for port in range(40000, 40004):
        if not (family == socket.AF_INET6 and str(port) in sys.argv[1:]):
            socket.create_server((host, port), family=family).close()
"""


def in_a_namespace(*in_use_on_ipv6: int) -> dict[str, object]:
    """IN_A_NAMESPACE's result; the test is skipped where no namespace can be made
    (not root, or a container that forbids it)."""
    setup = ("ip link set lo up && echo '40000 40003' > /proc/sys/net/ipv4/ip_local_port_range"
             ' && exec "$0" -c "$1" "${@:2}"')
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("no unshare(1) or ip(8) here")
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("no network namespace can be made here (unshare -n needs root)")
    ran = subprocess.run(["unshare", "-n", "bash", "-c", setup, sys.executable, IN_A_NAMESPACE,
                          *map(str, in_use_on_ipv6)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_port_0_passes_over_a_free_port_in_use_on_another_address():
    """40001 and 40003 in use on IPv6: the IPv4 socket's free port may be one of them
    (Linux gives bind() ports of the opposite parity to the range's first, so 40001 or
    40003, first, as it did every time on this host's Linux 6.18), in use on IPv6. The
    port is passed over for another, the same on both addresses, and the sockets of
    those passed over are closed. Before, that was a refusal: "Address already in use
    (on [::]:40001)"."""
    found = in_a_namespace(40001, 40003)
    assert "ports" in found, found
    ipv4, ipv6 = found["ports"]
    assert ipv4[0] == "AF_INET" and ipv6[0] == "AF_INET6"
    assert ipv4[1] == ipv6[1] and ipv4[1] in (40000, 40002), found


def test_port_0_with_every_free_port_in_use_on_another_address_is_one_line():
    """Each of the namespace's four ports in use on IPv6: each is tried on IPv4 (held,
    so that the next try finds another), none is free on both, and the refusal names
    the address no port was left on."""
    found = in_a_namespace(40000, 40001, 40002, 40003)
    assert found == {"refused": "Cannot listen on every interface's port 0: Address "
                                "already in use (on 0.0.0.0:0)"}
