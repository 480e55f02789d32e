"""Maintenance: the reaper's services.

Owns: the reaper (``reaper.Reaper``: dead workers' claims, expired leases, due
messages, periodic tasks, statistics and alarms, pruning, each a step of its
pass; ``reap_report``, what a pass did; ``queue_errors``, an error met serving one
queue, counted on its row), pruning past retention, periodic (cron)
django.tasks from the settings and the database (their cron expressions are read by
``djqueue.cron``), and the list of them with their last and next runs
(``periodic_listing``, the periodic command's).

May import: djqueue.monitoring and below.
"""
