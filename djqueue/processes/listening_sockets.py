"""The listening sockets of a djqueue server (``djqueue_http``, ``djqueue_metrics``),
kept open across a SIGHUP's run anew, so a reload refuses no connection.

A server binds its sockets once, one for each address its ``--host`` names (as
uvicorn and asyncio do: ``localhost`` may be 127.0.0.1 and ::1, and ``""`` every
interface, IPv4 and IPv6), and serves copies of them (its HTTP library closes what it
serves as it stops). Before ``run_anew``'s exec the originals are made inheritable and
their descriptors' numbers put in the environment; the new code serves those sockets
instead of binding again. Connections that come while the old code drains and the new
code starts wait in the sockets' backlogs, as under Gunicorn's reload, rather than
being refused for those seconds.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket

#: Set across a reload's exec: the numbers of the listening sockets' file descriptors,
#: comma-separated. Read, and removed from the environment, as the new code starts.
LISTENING_FDS = "DJQUEUE_LISTENING_FDS"

#: uvicorn's and the standard library's servers' backlog, at least.
BACKLOG = 2048

#: Free ports that port 0 on several addresses tries before it gives up, each found free
#: on the first address and in use on another. Even two in a row are rare.
PORT_0_TRIES = 10


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """The sockets to serve: those a reload kept open, or new ones bound to each of
    ``host``'s addresses on ``port`` (port 0: one free port, the same on every address,
    so a start line names one port; one free on the first address and in use on another
    is passed over for the next). An address that cannot be listened on is a
    ``CannotListen`` naming it."""
    inherited = os.environ.pop(LISTENING_FDS, None)
    if inherited is not None:
        return _inherited(inherited)
    where = f"{host}:{port}" if host else f"every interface's port {port}"
    try:
        addresses = _addresses(host, port)
    except OSError as error:
        raise CannotListen(f"Cannot listen on {where}: {error.strerror or error}") from None
    except UnicodeError as error:  # IDNA: an empty label, one past 63 characters, no UTF-8
        raise CannotListen(f"Cannot listen on {where}: not a host name ({error})") from None
    # Port 0: the first address's free port may be taken on another (free on IPv4, in use
    # on IPv6). Its socket is then held until the end, so that the next try's is another.
    passed_over: list[socket.socket] = []
    try:
        while True:
            listeners = _bind_each_address(addresses, port, passed_over, where, host)
            if listeners:
                return listeners
    finally:
        for listener in passed_over:
            listener.close()


def _bind_each_address(addresses: list[tuple[int, tuple[object, ...]]], port: int,
                       passed_over: list[socket.socket], where: str,
                       host: str) -> list[socket.socket]:
    """One try at a listening socket on each address: the sockets, or none when port 0's
    free port on the first address is in use on another (that socket then joins
    ``passed_over``, while fewer than ``PORT_0_TRIES`` have). Any other failure closes
    what was bound and is a ``CannotListen`` naming the address."""
    listeners: list[socket.socket] = []
    try:
        for family, address in addresses:
            if port == 0 and listeners:
                address = (address[0], listeners[0].getsockname()[1], *address[2:])
            listeners.append(socket.create_server(address, family=family, backlog=BACKLOG))
        return listeners
    except OSError as error:
        try_another = (port == 0 and bool(listeners) and error.errno == errno.EADDRINUSE
                       and len(passed_over) < PORT_0_TRIES - 1)
        if try_another:
            passed_over.append(listeners.pop(0))
        for listener in listeners:
            listener.close()
        if try_another:
            return []
        which = f" (on {_url_host(address)})" if address[0] != host else ""
        # create_server's own message repeats the address, as a tuple.
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise CannotListen(f"Cannot listen on {where}: {reason}{which}") from None


class CannotListen(OSError):
    """A server's address it cannot listen on (in use, not this machine's, a host name
    that does not resolve), or inherited descriptors that are not listening sockets:
    the message says which, in one line."""

    def __str__(self) -> str:
        return str(self.args[0])


def keep_for_run_anew(listeners: list[socket.socket]) -> None:
    """Let ``listeners`` outlive the exec of ``run_anew``, for the new code to serve."""
    for listener in listeners:
        os.set_inheritable(listener.fileno(), True)
    os.environ[LISTENING_FDS] = ",".join(str(listener.fileno()) for listener in listeners)


def urls(listeners: list[socket.socket], path: str = "/") -> str:
    """The servers' URLs, for a start line: ``http://127.0.0.1:8001/ and
    http://[::1]:8001/``."""
    return " and ".join(f"http://{_url_host(listener.getsockname())}{path}"
                        for listener in listeners)


def _addresses(host: str, port: int) -> list[tuple[int, tuple[object, ...]]]:
    """Each address ``host`` names, once, in the resolver's order (``""``: every
    interface's)."""
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM,
                               0, socket.AI_PASSIVE)
    addresses: list[tuple[int, tuple[object, ...]]] = []
    for family, _, _, _, address in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and \
                (family, tuple(address)) not in addresses:
            addresses.append((family, tuple(address)))
    if not addresses:
        raise OSError(f"{host!r} names no IPv4 or IPv6 address")
    return addresses


def _inherited(numbers: str) -> list[socket.socket]:
    listeners: list[socket.socket] = []
    try:
        for number in numbers.split(","):
            listener = socket.socket(fileno=int(number))
            listener.set_inheritable(False)
            listeners.append(listener)
    except (ValueError, OSError) as error:
        for listener in listeners:
            with contextlib.suppress(OSError):
                listener.close()
        raise CannotListen(f"{LISTENING_FDS}={numbers!r} is not the listening sockets "
                           f"a reload keeps open: {error}") from None
    return listeners


def _url_host(address: tuple[object, ...]) -> str:
    """An address and port as a URL writes them (an IPv6 one bracketed)."""
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
