"""What applications call: send, receive, owner mode, queue and topic operations.

Owns: sending (validation, dedup, expiry stamps; ``sending``) and its flow control
(``flow_control``: ``max_depth`` and blocking sends), sending from async code
(``async_sending``), receiving (``receive``, ``consume``, ``OwnerSession``) and
receiving from async code (``async_receiving``), managing queues, operating on them
without claiming (redrive, purge, peek, delete), topics with consumer groups, the
condition language of conditional receive, and waking idle workers and waiting
receives in other processes when a send commits (``worker_wakeups``,
``receive_wakeups``) or another change makes messages ready (``ready_wakeups``).

May import: djqueue.storage, djqueue.models and the modules below them
(conf, exceptions, signals, payloads, polling, types). Never the worker,
maintenance, monitoring, tasks, admin or export (checked by import-linter).
"""
