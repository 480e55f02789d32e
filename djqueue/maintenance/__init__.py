"""Maintenance: the reaper's services.

Owns: the reaper (``reaper.Reaper``: dead workers' claims, expired leases, due
messages, periodic tasks, statistics and alarms, pruning, each a step of its
pass), pruning past retention, periodic (cron) django.tasks and the cron
expressions they are written in.

May import: djqueue.monitoring and below.
"""
