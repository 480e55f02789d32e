"""Monitoring: statistics, alarms and the dashboard's numbers, without counting the
message table.

Owns: per-queue roll-ups by minute, hour and day and depth snapshots
(``rollups``; what happened since the last, counted by minute: ``minute_counts``),
alarm policies and their evaluation (``alarms``), and the dashboard's snapshot read
in a fixed number of indexed queries (``snapshot``) and its charts from the roll-ups
(``charts``), and the list of queues with their sampled depths that the queues
command and the HTTP API's ``GET queues`` answer (``queue_listing``), and the
registered worker processes the workers command lists (``worker_listing``).

May import: djqueue.processes and below.
"""
