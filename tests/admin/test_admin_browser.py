"""The admin in a real browser: Playwright driving Debian's Chromium, headless.

Screenshots of each step go to test-artifacts/ (kept by CI as artefacts).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

import djqueue
from djqueue.models import Message, Queue, State
from djqueue.monitoring import rollups

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `scripts/ensure_system.sh browser` installs it")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test
    # makes between page actions are still synchronous. The switch is undone after this
    # module: left on, it hid the guard that later tests of async code check.
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def ops_page(browser, live_server) -> Iterator[object]:
    """A page logged in to the admin as a superuser, with the admin theme loaded."""
    call_command("loaddata", "djqueue_admin_theme", verbosity=0)
    User.objects.create_superuser("ops", password="s3cret-pw")
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # Every request the pages make is answered: no missing script, style or icon.
    refused: list[tuple[int, str]] = []
    page.on("response", lambda r: refused.append((r.status, r.url)) if r.status >= 400 else None)
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "s3cret-pw")
    page.click("input[type=submit]")
    yield page
    page.close()
    assert not refused, refused


def count(page, queue: str, state: str) -> int:
    return int(page.locator(f'tr[data-queue="{queue}"] td[data-count="{state}"]').inner_text())


def test_operator_pauses_a_queue_and_redrives_a_dead_letter(ops_page, live_server):
    dead = djqueue.create_queue("web.dead")
    djqueue.create_queue("web.jobs", max_attempts=1, dead_letter_queue=dead)
    djqueue.send_batch("web.jobs", [{"n": i} for i in range(4)])
    [failing] = djqueue.receive("web.jobs")
    failing.nack(error="RuntimeError: printer on fire")
    rollups.sample_depth()
    page = ops_page
    page.click("text=Dashboard")
    page.wait_for_selector("#djqueue-dashboard")
    page.screenshot(path=ARTIFACTS / "dashboard-1-start.png", full_page=True)
    assert (count(page, "web.jobs", "ready"), count(page, "web.dead", "dead")) == (3, 1)

    page.click('tr[data-queue="web.jobs"] button[data-op="pause"]')
    page.wait_for_selector('tr[data-queue="web.jobs"] [data-paused]')
    assert Queue.objects.get(name="web.jobs").paused
    page.locator(".messagelist li", has_text="Paused web.jobs.").wait_for()
    page.screenshot(path=ARTIFACTS / "dashboard-2-paused.png", full_page=True)

    page.click('tr[data-queue="web.dead"] a[data-op="redrive"]')
    page.wait_for_selector("#djqueue-confirm")
    page.screenshot(path=ARTIFACTS / "dashboard-3-confirm-redrive.png", full_page=True)
    page.click("#djqueue-confirm-button")
    page.wait_for_selector("#djqueue-dashboard")
    assert (count(page, "web.jobs", "ready"), count(page, "web.dead", "dead")) == (4, 0)
    assert Message.objects.get(pk=failing.pk).state == State.READY
    page.screenshot(path=ARTIFACTS / "dashboard-4-redriven.png", full_page=True)

    page.click(f'a[href$="/admin/djqueue/message/?queue__id__exact={failing.queue_id}"]')
    page.goto(f"{live_server.url}/admin/djqueue/message/{failing.pk}/change/")
    assert "RuntimeError: printer on fire" in page.inner_text("#content")
    page.screenshot(path=ARTIFACTS / "message-detail.png", full_page=True)


def test_operator_sees_a_limit_held_and_raises_it_from_the_queue_page(ops_page, live_server):
    djqueue.create_queue("web.sms", concurrency_limit=2, group_rate_limit="1/h")
    djqueue.send_batch("web.sms", [{"n": i} for i in range(3)], group_key="tenant-7")
    djqueue.send_batch("web.sms", [{"n": i} for i in range(6)])
    assert len(djqueue.receive("web.sms", max_messages=10)) == 2
    assert djqueue.receive("web.sms", max_messages=10) == []  # held back by the limit
    rollups.sample_depth()
    page = ops_page
    page.goto(f"{live_server.url}/admin/djqueue/dashboard/")
    row = page.locator('tr[data-limited-queue="web.sms"]')
    assert row.locator('[data-limit="in_flight"]').inner_text() == "2 / 2"
    assert int(row.locator('[data-limit="held_back"]').inner_text()) >= 1
    assert "tenant-7 (1)" in row.locator('[data-limit="busiest_keys"]').inner_text()
    assert "tenant-7" in row.locator('[data-limit="throttled_keys"]').inner_text()
    assert "1/h a key" in row.inner_text()
    page.screenshot(path=ARTIFACTS / "limits-1-held.png", full_page=True)

    page.click('tr[data-limited-queue="web.sms"] a')
    assert page.locator(".field-handler .readonly").inner_text().startswith(
        "No handler for queue 'web.sms'")
    page.fill("#id_concurrency_limit", "5")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist")
    assert djqueue.get_queue("web.sms", fresh=True).concurrency_limit == 5
    got = djqueue.receive("web.sms", max_messages=10)  # tenant-7 waits for its rate
    assert len(got) == 3 and not any(m.group_key for m in got)
    rollups.sample_depth()
    page.goto(f"{live_server.url}/admin/djqueue/dashboard/")
    row = page.locator('tr[data-limited-queue="web.sms"]')
    assert row.locator('[data-limit="in_flight"]').inner_text() == "5 / 5"
    page.screenshot(path=ARTIFACTS / "limits-2-raised.png", full_page=True)


def test_the_charts_show_a_drain_and_refresh_in_place(ops_page, live_server):
    from tests.monitoring.test_stats import roll_up_all

    djqueue.create_queue("web.charts")
    djqueue.create_queue("web.other")
    djqueue.send_batch("web.charts", [{"n": i} for i in range(30)])
    djqueue.send_batch("web.other", [{"n": i} for i in range(5)])
    djqueue.ack_many(djqueue.receive("web.charts", max_messages=20))
    djqueue.ack_many(djqueue.receive("web.other", max_messages=5))
    roll_up_all()
    page = ops_page
    page.goto(f"{live_server.url}/admin/djqueue/dashboard/")
    finished = "#djqueue-chart-finished-minute svg"
    assert page.locator(finished).get_attribute("data-total") == "25"
    for chart in ("finished-hour", "wait-minute", "run-minute", "run-hour"):
        assert int(page.locator(f"#djqueue-chart-{chart} svg").get_attribute(
            "data-bars")) >= 1, chart
    assert not page.locator("#djqueue-charts-empty").count()
    page.screenshot(path=ARTIFACTS / "charts-1-drained.png", full_page=True)

    page.evaluate("window.djqueueTestMark = 'not reloaded'")
    djqueue.ack_many(djqueue.receive("web.charts", max_messages=10))
    roll_up_all()
    page.wait_for_function(
        f"document.querySelector('{finished}').dataset.total === '35'", timeout=20_000)
    assert page.evaluate("window.djqueueTestMark") == "not reloaded"
    page.select_option("#djqueue-chart-queue", "web.charts")
    page.wait_for_selector('#djqueue-charts section[data-queue="web.charts"]')
    assert page.locator(finished).get_attribute("data-total") == "30"
    assert page.evaluate("window.djqueueTestMark") == "not reloaded"
    page.screenshot(path=ARTIFACTS / "charts-2-one-queue-refreshed.png", full_page=True)


def test_a_running_handlers_progress_and_then_its_log_records(ops_page, live_server, spawn,
                                                               tmp_path):
    from djqueue.models import History
    from tests.conftest import wait_until

    djqueue.create_queue("t.report", max_attempts=3, backoff=[0.1])
    hold = tmp_path / "hold"
    sent = djqueue.send("t.report", {"n": 42, "hold": str(hold), "fail_on": [1]})
    spawn("djqueue_worker", "t.report")
    wait_until(lambda: djqueue.get_progress(sent.pk), 30, "the handler's first report")
    page = ops_page
    page.goto(f"{live_server.url}/admin/djqueue/message/{sent.pk}/change/")
    bar = page.locator(".djqueue-progress")
    assert bar.get_attribute("data-percent") == "40"
    assert "resized 40 of 100" in bar.inner_text()
    assert "claimed" in page.inner_text("#content")  # still running
    page.screenshot(path=ARTIFACTS / "progress-1-running.png", full_page=True)

    hold.touch()
    wait_until(lambda: History.objects.filter(pk=sent.pk).exists(), 30, "the retry to finish")
    page.goto(f"{live_server.url}/admin/djqueue/history/{sent.pk}/change/")
    rows = page.locator("table.djqueue-logs tr[data-log-level]")
    assert rows.count() == 6
    assert [rows.nth(i).get_attribute("data-log-level") for i in range(6)] == [
        "INFO", "WARNING", "ERROR", "INFO", "WARNING", "INFO"]
    assert "OSError: disk full on attempt 1" in rows.nth(2).inner_text()
    assert page.locator(".djqueue-progress").get_attribute("data-percent") == "100"
    page.screenshot(path=ARTIFACTS / "progress-2-logs-after.png", full_page=True)


def test_a_failed_workflow_as_a_picture_and_its_retry_from_the_page(ops_page, live_server,
                                                                     spawn, tmp_path):
    from tests import tasks
    from tests.conftest import wait_until

    marker = tmp_path / "fail"
    marker.touch()
    fetch = djqueue.step(tasks.wf_node, 1).named("fetch order")
    resize = [djqueue.step(tasks.wf_node, 10 + i).named(f"resize {i}").after(fetch)
              for i in range(3)]
    charge = djqueue.step(tasks.wf_fail_while, 2, str(marker)).named("charge card").after(fetch)
    ship = djqueue.step(tasks.wf_node, 3).named("ship").after(*resize, charge)
    handle = djqueue.workflow(fetch, *resize, charge, ship).enqueue(name="order 42")
    spawn("djqueue_worker", "t.wf", "t.wf-final")
    wait_until(lambda: handle.refresh().is_finished, 30, "the workflow to fail")
    page = ops_page
    page.goto(f"{live_server.url}/admin/djqueue/workflow/?state__exact=3")
    assert "order 42" in page.inner_text("#result_list")
    page.click("#result_list a >> text=" + str(handle.id))
    graph = page.locator("#djqueue-workflow-graph")
    assert graph.get_attribute("data-steps") == "6"
    state = {name: graph.locator(f"g[data-step='{name}']").get_attribute("data-state")
             for name in ("fetch order", "resize 0", "charge card", "ship")}
    assert state == {"fetch order": "succeeded", "resize 0": "succeeded",
                     "charge card": "failed", "ship": "cancelled"}
    page.screenshot(path=ARTIFACTS / "workflow-1-failed.png", full_page=True)

    marker.unlink()
    page.click("#djqueue-workflow-retry")
    # The click only starts the POST and its redirect: wait for the message, which the
    # parser may show as an empty list for a moment, rather than read it at once.
    page.locator(".messagelist li", has_text="2 step(s) will run again").wait_for()
    wait_until(lambda: handle.refresh().status == "SUCCEEDED", 30, "the retried workflow")
    page.reload()
    graph = page.locator("#djqueue-workflow-graph")
    assert {graph.locator("g.djqueue-step").nth(i).get_attribute("data-state")
            for i in range(6)} == {"succeeded"}
    assert not page.locator("#djqueue-workflow-retry").count()
    page.screenshot(path=ARTIFACTS / "workflow-2-retried.png", full_page=True)


def test_operator_adds_a_periodic_schedule_and_runs_it_now(ops_page, live_server, spawn):
    from djqueue.models import PeriodicSchedule
    from tests import tasks
    from tests.conftest import wait_until

    page = ops_page
    page.goto(f"{live_server.url}/admin/djqueue/periodicschedule/add/")
    page.fill("#id_name", "nightly sums")
    page.select_option("#id_task_path", "tests.tasks.add")
    page.fill("#id_cron", "30 2 * * 1-5")
    page.select_option("#id_time_zone", "Europe/Paris")
    page.fill("#id_args", "[2]")  # one argument short: refused by the form
    page.click("input[name=_save]")
    page.locator(".errornote").wait_for()
    assert "do not fit tests.tasks.add" in page.inner_text("#content")
    page.screenshot(path=ARTIFACTS / "periodic-1-refused.png", full_page=True)
    page.fill("#id_args", "[2, 3]")
    page.click("input[name=_save]")
    page.locator(".messagelist li", has_text="nightly sums").wait_for()
    row = page.locator("#result_list tbody tr", has_text="nightly sums")
    assert "Europe/Paris" in row.inner_text() and "30 2 * * 1-5" in row.inner_text()
    assert PeriodicSchedule.objects.get().args == [2, 3]
    page.screenshot(path=ARTIFACTS / "periodic-2-listed.png", full_page=True)

    spawn("djqueue_worker", "default")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    said = page.locator(".messagelist li", has_text="nightly sums: enqueued")
    said.wait_for()
    result_id = said.inner_text().rsplit("(result ", 1)[1].rstrip(").")
    wait_until(lambda: tasks.add.get_result(result_id).status == "SUCCESSFUL", 30,
               "the worker to run the task")
    assert tasks.add.get_result(result_id).return_value == 5
    page.screenshot(path=ARTIFACTS / "periodic-3-run-now.png", full_page=True)


def _rgb(hex_colour: str) -> str:
    red, green, blue = (int(hex_colour.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgb({red}, {green}, {blue})"


def _contrast(a: str, b: str) -> float:
    """WCAG 2's contrast ratio of two ``rgb(r, g, b)`` colours."""
    def luminance(colour: str) -> float:
        channels = [int(c) / 255 for c in colour[4:-1].split(",")]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_breadcrumbs_wear_the_themes_colours_and_read_clearly(ops_page, live_server):
    """On Django 6 the breadcrumbs are an ``ol``, which the theme does not colour; the
    demo's admin/base_site.html gives it the theme's module colours, as the theme gives
    Django 5.2's ``div``."""
    from admin_interface.models import Theme

    theme = Theme.objects.get(active=True)
    page = ops_page
    for path in ("/admin/djqueue/queue/", "/admin/djqueue/dashboard/"):
        page.goto(f"{live_server.url}{path}")
        bar, link = page.locator(".breadcrumbs"), page.locator(".breadcrumbs a").first
        background = bar.evaluate("e => getComputedStyle(e).backgroundColor")
        link_colour = link.evaluate("e => getComputedStyle(e).color")
        assert (background, link_colour) == (
            _rgb(theme.css_module_background_color), _rgb(theme.css_module_link_color)), path
        assert _contrast(background, link_colour) >= 4.5, (path, background, link_colour)
    page.screenshot(path=ARTIFACTS / "breadcrumbs.png", clip={"x": 0, "y": 0, "width": 1400,
                                                             "height": 160})
