"""The HTTP API: JSON over HTTP for services in any language, with per-queue grants.

Mount it in the project's ``urls.py``::

    path("queue-api/", include("djqueue.http.urls")),

and serve the project with an ASGI server (``uvicorn project.asgi:application``):
a receive that waits (a long poll) then waits on the event loop, holding no
thread and no database connection.

Owns: the endpoints (djqueue.http.endpoints), who may call them
(djqueue.http.access: tokens, grants, quotas), the long polls
(djqueue.http.long_polls), the database threads the endpoints run their work on
(djqueue.http.database_threads), request bodies and problem documents, the
OpenAPI schema (djqueue.http.schema), and serving it all with uvicorn
(djqueue.http.serving, for ``manage.py djqueue_http``). Imports the queue's public API
(djqueue.api, djqueue.storage.transitions), the models and the settings; nothing
imports it but the project's URLconf, the admin and the management commands.
"""
