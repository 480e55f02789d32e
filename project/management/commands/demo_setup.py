import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.utils import timezone

import djqueue
from djqueue.http import access
from djqueue.models import (
    AlarmPolicy,
    ApiClient,
    ApiPermission,
    ConsumerGroup,
    PeriodicSchedule,
)


class Command(BaseCommand):
    help = "Create the demo queues, an admin user and sample messages."

    def handle(self, *args: Any, **options: Any) -> None:
        djqueue.create_queue("emails", exist_ok=True, visibility_timeout=60)
        djqueue.create_queue("reports", exist_ok=True)
        djqueue.create_queue("events", exist_ok=True)
        dead = djqueue.create_queue("flaky.dead", exist_ok=True)
        djqueue.create_queue("flaky", exist_ok=True, max_attempts=4, backoff=[2, 4, 8],
                             dead_letter_queue=dead)
        djqueue.create_topic("signups", exist_ok=True)
        if not ConsumerGroup.objects.filter(name="crm").exists():
            djqueue.subscribe("signups", "crm")
        AlarmPolicy.objects.get_or_create(
            name="emails backlog", defaults={"metric": "depth", "threshold": 100,
                                             "queue": djqueue.get_queue("emails")})
        AlarmPolicy.objects.get_or_create(
            name="dead letters", defaults={"metric": "dead_letters", "threshold": 0})
        # A periodic schedule kept in the database (the admin edits it), beside the
        # settings' "tidy-sessions".
        PeriodicSchedule.objects.get_or_create(
            name="tidy sessions at night", defaults={
                "task_path": "project.tasks.tidy_sessions", "cron": "30 2 * * *",
                "time_zone": "Europe/Paris"})
        call_command("loaddata", "djqueue_admin_theme", verbosity=0)
        username = os.environ.get("DJQUEUE_DEMO_USER", "admin")
        password = os.environ.get("DJQUEUE_DEMO_PASSWORD", "djqueue-demo")
        user, _ = get_user_model().objects.get_or_create(
            username=username, defaults={"is_staff": True, "is_superuser": True})
        user.set_password(password)
        user.save()
        djqueue.send_batch("emails", [
            {"to": f"user{i}@example.com", "subject": f"Welcome #{i}"} for i in range(20)])
        djqueue.send_batch("reports", [{"name": f"daily-{i}", "rows": 100_000} for i in range(5)],
                           priority=5)
        djqueue.send_batch("reports", [{"name": f"weekly-{i}", "rows": 1_000_000}
                                       for i in range(3)], delay=15)
        djqueue.send_batch("flaky", [{"n": i} for i in range(10)])
        djqueue.send_batch("events", [{"page": f"/products/{i % 7}"} for i in range(120)])
        djqueue.publish_batch("signups", [{"user": i} for i in range(8)])
        from project.tasks import welcome_email

        welcome_email.enqueue(user.pk)
        # The HTTP API: a demo client that may send to and receive from the demo queues,
        # with a fresh token each run (the last run's are revoked).
        client, _ = ApiClient.objects.get_or_create(
            name="demo", defaults={"description": "make run's demo client"})
        for pattern in ("emails", "reports", "events", "flaky*", "signups"):
            access.grant(client, pattern, ApiPermission.FULL_CONTROL)
        client.tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        token = access.issue_token(client)
        base = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}"
        self.stdout.write(self.style.SUCCESS(
            f"Demo ready. Admin: {base}/admin/  user {username!r} password {password!r}"))
        headers = f"-H 'Authorization: Bearer {token}' -H 'Content-Type: application/json'"
        self.stdout.write(
            f"HTTP API docs: {base}/queue-api/docs/  demo token: {token}\n"
            f"Send a message with curl:\n  curl -X POST {base}/queue-api/queues/emails/messages "
            f"""{headers} -d '{{"payload": {{"to": "you@example.com", "subject": "Hello over HTTP"}}}}'\n"""
            "Receive the signups waiting for the topic's consumer group 'crm' (no worker "
            f"takes them):\n  curl -X POST {base}/queue-api/topics/signups/groups/crm/receive "
            f"""{headers} -d '{{"max_messages": 10}}'""")
