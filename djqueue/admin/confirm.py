"""Confirmation pages (and small forms) in front of destructive or parameterised operations."""

from __future__ import annotations

from collections.abc import Iterable

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from djqueue.storage.unreadable_rows import read_rows

TEMPLATE = "admin/djqueue/confirm.html"


def confirmed(request: HttpRequest, form: forms.Form | None = None) -> bool:
    """Whether this POST is the answer of a confirmation page (with a valid form)."""
    return (request.method == "POST" and request.POST.get("confirm") == "yes"
            and (form is None or form.is_valid()))


def ask(request: HttpRequest, site: admin.AdminSite, *, title: str, question: str,
        objects: Iterable[object], confirm_label: str, cancel_url: str,
        form: forms.Form | None = None, action: str | None = None,
        selected: Iterable[object] = ()) -> TemplateResponse:
    """The page that asks; its form posts back with ``confirm=yes`` (and, for an admin
    action, the action's name and the selected ids, as Django's own delete does). A
    queryset of ``objects`` is read past a time a hand edit left unreadable."""
    return TemplateResponse(request, TEMPLATE, {
        **site.each_context(request), "title": title, "question": question,
        "objects": read_rows(objects) if isinstance(objects, QuerySet) else list(objects),
        "form": form, "confirm_label": confirm_label,
        "cancel_url": cancel_url, "action": action, "selected": [str(pk) for pk in selected],
        "checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    })


class VisibilityForm(forms.Form):
    seconds = forms.FloatField(
        min_value=0, max_value=12 * 3600,
        help_text="Claimed messages: the lease ends this many seconds from now. Ready or "
                  "delayed ones: they become visible then (0: ready at once).")


class ReplayForm(forms.Form):
    since = forms.DateTimeField(
        help_text="Deliver again every stored message published at or after this time "
                  "(YYYY-MM-DD HH:MM:SS, in the site's time zone).")
