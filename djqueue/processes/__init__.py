"""What long-running processes share: the process base, stop signals.

Owns: ``ProcessBase`` (register, heartbeat, main loop, interruptible sleep,
graceful shutdown, deregister), two-stage SIGTERM/SIGINT handling, the GIL
switch interval a worker runs with, and the memory limit a worker may set on itself.

May import: djqueue.api, djqueue.storage and below. Used by the worker, the
supervisor and the reaper.
"""
