"""Storage: the only layer that writes SQL, and every database difference.

Owns: the database differences with their reasons (``dialects``; each alias's
vendor, looked up once, in ``database_vendors``), session
locks, the two claim engines (row-locking, serial) and the claim transaction
(``claims``) and a receiver's round of claims over its queues and databases
(``receiver_claims``), the resume point of a draining claim and the one path that
makes messages ready again (``claim_resume``), the limits decided inside a claim
(``claim_limits``: a queue's rate and concurrency; ``key_rate_claims``: a rate per
group key), the state transitions of claimed messages (``transitions``), claims
returned and scheduled messages made ready by the reaper (``requeueing``), the
copy of finished messages into history, ordered groups, dedup keys, messages
that expire (``expiry``: the stamp a send gives, and a claim setting aside those past
it), ready messages whose row a claim cannot read (``unreadable_messages``: dead-lettered
so the rest of their queue flows), the trace,
what handlers report (progress and log records, ``handler_reports``), queue
lookup, payload encoding, the hand-written statements of the hot path
(``statements/``), and every use of Django's or a driver's private internals
(``fastpath``, quarantined there with a plain path each), and a process's
presence (``registration``: its row in ``djqueue_worker``, session locks and
heartbeat, shared by workers, API servers, waiting receives and reapers), how far this host's
clock is from each database server's (``host_clock``; one read of a server's clock,
``clock_reads``), whether djqueue's migrations
are applied on a database (``migration_state``), whether a failed connection was
refused for good (``connection_refusals``: its user, password or database), how a failure that repeats is
logged (``failure_streaks``: an outage is a few lines, not a traceback a try), rows holding a time no
driver reads back, read all the same (``unreadable_rows``), where each queue
lives (``placement``), and partitioned queues (``partitions``: sends and claims over
their partitions; ``partition_layout``: creating them and changing their layout).

May import: djqueue.models and the modules below them (conf, exceptions,
signals, polling, types, histograms). Never api, processes, worker,
maintenance, monitoring, tasks, admin or export (checked by import-linter).
"""
