"""The admin: a dashboard, a message browser, and permissioned operations on queues,
messages and consumer groups. Every operation calls the API; no queue logic lives here."""

from djqueue.admin import (  # noqa: F401  (they register)
    api_clients,
    browser,
    dashboard,
    queues,
    records,
    workflows,
)
