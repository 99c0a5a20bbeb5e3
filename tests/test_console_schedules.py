"""The console's schedules over HTTP, without a browser: the list, one schedule with its
fires, and the operator's pause, resume, fire now and delete, each with a reason (none:
back to the schedule's page with the error, nothing changed)."""

from __future__ import annotations

from tests.conftest import Gateway
from tests.test_console_operator import post, refused, signed_in


async def test_schedules_are_listed_shown_and_controlled(gateway: Gateway) -> None:
    status, _ = await gateway.call("PUT", "/v1/schedules/nightly", "t1", json={
        "cron": "0 2 * * *", "timezone": "Europe/Berlin", "channel": "task",
        "template": {"site": "shop", "kind": "export", "params": {}}})
    assert status == 201
    csrf = await signed_in(gateway)
    html = await (await gateway.client.get("/console/schedules")).get_data(as_text=True)
    assert 'href="/console/schedules/nightly"' in html and "Europe/Berlin" in html
    html = await (await gateway.client.get("/console/schedules/nightly")).get_data(
        as_text=True)
    assert "No fire yet." in html and 'action="/console/schedules/nightly/pause"' in html

    assert 'name="back" value="/console/schedules/nightly"' in html
    # An operator's action says why: refused, back to the form with the error.
    kept = await refused(gateway, "/console/schedules/nightly/pause",
                         {"csrf": csrf, "reason": "", "back": "/console/schedules/nightly"},
                         back="/console/schedules/nightly")
    assert kept["message"] == "reason is required"
    response = await gateway.client.post("/console/schedules/nightly/pause",
                                         form={"csrf": csrf, "reason": " ",
                                               "back": "/console/schedules/nightly"})
    assert (response.status_code, response.headers["Location"]) == (
        303, "/console/schedules/nightly")  # no Referer: the form's back
    _, shown = await gateway.call("GET", "/v1/schedules/nightly", "admin")
    assert shown["paused"] is False
    status, _ = await post(gateway, "/console/schedules/nightly/pause",
                           {"csrf": csrf, "reason": "shop closed"})
    assert status == 303
    _, shown = await gateway.call("GET", "/v1/schedules/nightly", "admin")
    assert (shown["paused"], shown["next_fire_at"]) == (True, None)
    html = await (await gateway.client.get("/console/schedules/nightly")).get_data(
        as_text=True)
    assert 'action="/console/schedules/nightly/resume"' in html

    status, _ = await post(gateway, "/console/schedules/nightly/trigger",
                           {"csrf": csrf, "reason": "a report now"})
    assert status == 303
    html = await (await gateway.client.get("/console/schedules/nightly")).get_data(
        as_text=True)
    # The fire's id names the moment it fired (the virtual clock may have moved on a
    # little while the storage threads worked): the API says which.
    _, shown = await gateway.call("GET", "/v1/schedules/nightly", "admin")
    fired = shown["fires"][0]["job_id"]
    assert fired.startswith("nightly@2026-11-30T08:00:")
    assert fired in html and "submitted" in html
    status, _ = await gateway.call("GET", f"/v1/tasks/{fired}", "t1")
    assert status == 200

    status, _ = await post(gateway, "/console/schedules/nightly/resume",
                           {"csrf": csrf, "reason": "open again"})
    assert status == 303
    status, _ = await post(gateway, "/console/schedules/nightly/delete",
                           {"csrf": csrf, "reason": "not needed"})
    assert status == 303
    status, _ = await gateway.call("GET", "/v1/schedules/nightly", "admin")
    assert status == 404
    response = await gateway.client.get("/console/schedules/nightly")
    assert response.status_code == 404
