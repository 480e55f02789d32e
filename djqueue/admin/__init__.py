"""The admin: a dashboard, a message browser, permissioned operations on queues,
messages and consumer groups, and the periodic schedules kept in the database. Every
operation calls the API; no queue logic lives here."""

from djqueue.admin import (  # noqa: F401  (they register)
    api_clients,
    browser,
    dashboard,
    periodic_schedules,
    queues,
    records,
    workflows,
)
