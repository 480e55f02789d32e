from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from djqueue.monitoring.views import metrics

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    # Prometheus scrapes this (set DJQUEUE["METRICS_TOKEN"] to require a bearer token).
    path("metrics", metrics, name="djqueue-metrics"),
    # The HTTP API for services in other languages (docs at /queue-api/docs/).
    path("queue-api/", include("djqueue.http.urls")),
]
