"""A live stream's loop over a subscription (engine.signals): events as they come, a keep-alive
when none came for a while, and an end once the client has gone."""

from __future__ import annotations

from postroom.engine.signals import EventBus


async def test_events_come_with_keepalives_and_end_when_the_client_is_gone() -> None:
    bus = EventBus()
    subscription = bus.subscribe(kinds=frozenset({"message"}))
    bus.publish("message", {"seq": 1})
    checks: list[bool] = []

    async def gone() -> bool:
        checks.append(True)
        return len(checks) > 1  # still there at the first quiet spell, gone at the second

    seen = [
        None if event is None else event.data
        async for event in subscription.with_keepalives(0.01, gone)
    ]
    assert seen == [{"seq": 1}, None]
    subscription.close()


async def test_a_closed_subscription_ends_the_stream() -> None:
    bus = EventBus()
    subscription = bus.subscribe()
    subscription.close()

    async def never() -> bool:
        raise AssertionError("a closed subscription ends before any keep-alive")

    assert [e async for e in subscription.with_keepalives(60, never)] == []
