"""What long-running processes share: the process base, stop signals.

Owns: ``ProcessBase`` (register, heartbeat, main loop, interruptible sleep,
graceful shutdown, deregister), two-stage SIGTERM/SIGINT handling, the GIL
switch interval a worker runs with, the memory limit a worker may set on itself, and
a server's listening sockets (each address its host names) kept across a reload.

May import: djqueue.api, djqueue.storage and below. Used by the worker, the
supervisor and the reaper.
"""
