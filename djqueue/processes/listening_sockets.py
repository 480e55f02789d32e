"""The listening socket of a djqueue server (``djqueue_http``, ``djqueue_metrics``),
kept open across a SIGHUP's run anew, so a reload refuses no connection.

A server binds its socket once, and serves a copy of it (its HTTP library closes what
it serves as it stops). Before ``run_anew``'s exec the original is made inheritable and
its descriptor's number put in the environment; the new code serves that socket
instead of binding again. Connections that come while the old code drains and the new
code starts wait in the socket's backlog, as under Gunicorn's reload, rather than
being refused for those seconds.
"""

from __future__ import annotations

import os
import socket

#: Set across a reload's exec: the number of the listening socket's file descriptor.
#: Read, and removed from the environment, as the new code starts.
LISTENING_FD = "DJQUEUE_LISTENING_FD"


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket to serve: the one a reload kept open, or a new one bound to
    ``host:port`` (an ``OSError`` naming the address if it cannot be)."""
    inherited = os.environ.pop(LISTENING_FD, None)
    if inherited is not None:
        try:
            listener = socket.socket(fileno=int(inherited))
        except (ValueError, OSError) as error:
            raise OSError(f"{LISTENING_FD}={inherited!r} is not the listening socket a "
                          f"reload keeps open: {error}") from None
        listener.set_inheritable(False)
        return listener
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # uvicorn's and the standard library's servers' backlog, at least.
    return socket.create_server((host, port), family=family, backlog=2048)


def keep_for_run_anew(listener: socket.socket) -> None:
    """Let ``listener`` outlive the exec of ``run_anew``, for the new code to serve."""
    os.set_inheritable(listener.fileno(), True)
    os.environ[LISTENING_FD] = str(listener.fileno())


def url_host(listener: socket.socket) -> str:
    """``listener``'s address and port as a URL writes them (an IPv6 one bracketed)."""
    host, port = listener.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
