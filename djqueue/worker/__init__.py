"""The worker: which function handles which queue, and the process that runs them.

Owns: the handler registry and its handler sources (``registry``), the
worker's options, the worker (``message_worker.Worker``: claims in batches,
runs handlers on threads, acks in batches), the calls of handlers
(``handler_calls``, a message or a batch handler's list a run; a batch
handler's window, ``batch_windows``) on handler threads with their time limit
(``handler_threads``), the messages claimed and not yet settled
(``held_messages``), the acks that wait to ride with the next claim
(``ack_batches``), handlers' hooks in that transaction (``claim_hooks``),
the claims on each database (``database_claims``) and when each is next due
(``database_pacing``), prefetch pacing (``prefetch``), when the worker's loop
ends by itself (``run_limits``: --max-messages, --max-seconds, stuck threads,
--max-rss), the supervisor of several worker processes
(``djqueue_worker --processes``), and ``djqueue.drain()``, which runs handlers in
the caller's thread for tests (``inline_drain``).

May import: djqueue.processes and below. Never djqueue.tasks: the django.tasks
backend adds its queues' handler to the registry as a handler source.
"""
