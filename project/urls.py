from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.generic import RedirectView

from djqueue.monitoring.views import metrics

#: The demo's icon: three queued messages in the admin theme's colours. Browsers ask
#: for /favicon.ico on every new page; unanswered, each ask was a "Not Found" line in
#: the demo's terminal.
ICON = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
        b'<rect width="16" height="16" rx="3" fill="#1F3A5F"/>'
        b'<rect x="3" y="3" width="10" height="2.4" rx="1" fill="#9CC9F5"/>'
        b'<rect x="3" y="6.8" width="10" height="2.4" rx="1" fill="#F5F7FA"/>'
        b'<rect x="3" y="10.6" width="10" height="2.4" rx="1" fill="#F5F7FA"/></svg>')


@cache_control(max_age=86400, public=True)
def icon(request: HttpRequest) -> HttpResponse:
    return HttpResponse(ICON, content_type="image/svg+xml")


urlpatterns = [
    path("favicon.ico", icon),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    # Prometheus scrapes this (set DJQUEUE["METRICS_TOKEN"] to require a bearer token).
    path("metrics", metrics, name="djqueue-metrics"),
    # The HTTP API for services in other languages (docs at /queue-api/docs/).
    path("queue-api/", include("djqueue.http.urls")),
]
