"""Channel health judged from real events: healthy only after recent traffic, failing on a
refused send newer than the last one through, down when the adapter stopped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from postroom.engine.health import RECENT_S, DeliveryHealth, channel_health

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat()


def _one(status: dict[str, object], sends: DeliveryHealth | None = None) -> str:
    (found,) = channel_health(
        [status],
        (sends or DeliveryHealth(clock=lambda: NOW)).snapshot(),
        adapter_platforms={"telegram": ("telegram",)},
        webhooks=(),
        now=NOW,
    )
    return found.state


def test_a_connected_adapter_is_healthy_only_after_recent_traffic() -> None:
    base = {"name": "telegram", "state": "connected"}
    assert _one(base) == "idle"
    assert _one(base | {"last_event_at": _ago(RECENT_S + 1)}) == "idle"
    assert _one(base | {"last_event_at": _ago(60)}) == "healthy"
    assert _one(base | {"probed_at": _ago(60)}) == "healthy"


def test_a_stopped_poller_is_down_and_a_newer_error_is_failing() -> None:
    assert _one({"name": "telegram", "state": "error", "last_event_at": _ago(5)}) == "down"
    status = {
        "name": "telegram",
        "state": "connected",
        "last_event_at": _ago(60),
        "last_error": "boom",
        "last_error_at": _ago(30),
    }
    assert _one(status) == "failing"


def test_a_refused_send_makes_the_adapter_failing_until_one_goes_through() -> None:
    moment = [NOW - timedelta(seconds=20)]
    sends = DeliveryHealth(clock=lambda: moment[0])
    sends.sent("telegram:1")
    moment[0] = NOW - timedelta(seconds=10)
    sends.failed("telegram:1", "429 slow down")
    status = {"name": "telegram", "state": "connected", "last_event_at": _ago(100)}
    assert _one(status, sends) == "failing"
    moment[0] = NOW
    sends.sent("telegram:2")
    assert _one(status, sends) == "healthy"


def test_a_webhook_platform_is_judged_by_its_sends() -> None:
    sends = DeliveryHealth(clock=lambda: NOW)
    sends.failed("sms:1", "webhook unreachable")
    (quiet, sms) = channel_health(
        [], sends.snapshot(), adapter_platforms={}, webhooks=("sms", "api"), now=NOW
    )
    assert (quiet.name, quiet.state) == ("api webhook", "idle")
    assert (sms.name, sms.state, sms.last_error) == (
        "sms webhook",
        "failing",
        "webhook unreachable",
    )
