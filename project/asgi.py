"""The demo project over ASGI (``uvicorn project.asgi:application``): the admin, the
metrics and the HTTP API, whose long polls wait on the event loop. With DEBUG on,
static files (the admin's) are served too, as ``runserver`` would."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_asgi_application()

# The HTTP API's requests skip the middleware, so a waiting one holds no thread
# (djqueue.http.asgi says why). Imported once Django is set up.
from djqueue.http.asgi import with_api  # noqa: E402

application = with_api(application)

if settings.DEBUG:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    application = ASGIStaticFilesHandler(application)
