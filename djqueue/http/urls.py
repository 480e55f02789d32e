"""The HTTP API's URLs: ``path("queue-api/", include("djqueue.http.urls"))``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import path

from djqueue.http import schema
from djqueue.http.endpoints import views

app_name = "djqueue_http"
_views = views()


def openapi_json(request: HttpRequest) -> HttpResponse:
    return JsonResponse(schema.openapi())


def docs_page(request: HttpRequest) -> HttpResponse:
    """The schema as a page: each endpoint, what it takes and what it answers."""
    document = schema.openapi()
    operations = [{"path": route, "method": method.upper(), **operation}
                  for route, methods in document["paths"].items()
                  for method, operation in methods.items()]
    return render(request, "djqueue/http/docs.html", {
        "info": document["info"], "operations": operations,
        "schemas": document["components"]["schemas"], "base": request.path.rsplit("docs/", 1)[0]})


urlpatterns = [
    path("openapi.json", openapi_json, name="openapi"),
    path("docs/", docs_page, name="docs"),
    path("queues", _views["queues"], name="queues"),
    path("queues/<str:queue>", _views["queue"], name="queue"),
    path("queues/<str:queue>/messages", _views["messages"], name="messages"),
    path("queues/<str:queue>/receive", _views["receive"], name="receive"),
    path("queues/<str:queue>/ack", _views["ack"], name="ack"),
    path("queues/<str:queue>/nack", _views["nack"], name="nack"),
    path("queues/<str:queue>/extend", _views["extend"], name="extend"),
    path("queues/<str:queue>/redrive", _views["redrive"], name="redrive"),
    path("queues/<str:queue>/purge", _views["purge"], name="purge"),
    path("queues/<str:queue>/pause", _views["pause"], name="pause"),
    path("queues/<str:queue>/resume", _views["resume"], name="resume"),
    path("topics/<str:topic>/messages", _views["publish"], name="publish"),
    path("topics/<str:topic>/groups/<str:group>/receive", _views["group-receive"],
         name="group-receive"),
    path("topics/<str:topic>/groups/<str:group>/ack", _views["group-ack"], name="group-ack"),
    path("topics/<str:topic>/groups/<str:group>/nack", _views["group-nack"],
         name="group-nack"),
    path("topics/<str:topic>/groups/<str:group>/extend", _views["group-extend"],
         name="group-extend"),
]
