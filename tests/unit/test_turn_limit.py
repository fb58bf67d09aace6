"""The per-chat turn limit (PIPELINE §1 item 7): decision layer ``limit``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from postroom.core.decision import Action, Decision, Layer
from postroom.engine.turn_limit import TurnLimiter

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHAT = "telegram:group/5"
FIRE = Decision(Action.FIRE, Layer.ROUTE, folder="atlas", topic="", content="hi", trail=("row 2",))


def fire_n(limiter: TurnLimiter, n: int, *, sender: str = "telegram:user/1", at: datetime = T0):
    for i in range(n):
        limiter.record(FIRE, CHAT, sender, at + timedelta(seconds=i))


def test_the_turn_past_the_limit_is_observed_with_its_reason() -> None:
    limiter = TurnLimiter(turns_per_minute=3)
    fire_n(limiter, 2)
    assert limiter.check(FIRE, CHAT, "telegram:user/2", T0 + timedelta(seconds=5)) is FIRE
    fire_n(limiter, 1, at=T0 + timedelta(seconds=5))
    limited = limiter.check(FIRE, CHAT, "telegram:user/2", T0 + timedelta(seconds=6))
    assert (limited.action, limited.layer, limited.folder, limited.topic) == (
        Action.OBSERVE,
        Layer.LIMIT,
        "atlas",
        "",
    )
    assert limited.to_dict()["layer"] == "limit"
    assert "row 2" in limited.reason and "turns_per_minute" in limited.reason


def test_the_window_is_any_60_seconds() -> None:
    limiter = TurnLimiter(turns_per_minute=2)
    fire_n(limiter, 2)  # at 0 s and 1 s
    assert limiter.check(FIRE, CHAT, "x:y", T0 + timedelta(seconds=59.5)).layer is Layer.LIMIT
    assert limiter.check(FIRE, CHAT, "x:y", T0 + timedelta(seconds=60)).layer is Layer.ROUTE


def test_other_chats_owners_and_operator_chats_are_not_limited() -> None:
    limiter = TurnLimiter(turns_per_minute=1, owners=frozenset({"telegram:user/boss"}))
    fire_n(limiter, 1)
    assert limiter.check(FIRE, "telegram:group/6", "x:y", T0).action is Action.FIRE
    assert limiter.check(FIRE, CHAT, "telegram:user/boss", T0).action is Action.FIRE
    assert limiter.check(FIRE, "tui:atlas", "tui-user", T0).action is Action.FIRE
    # An owner's turns do not count toward the chat's limit either.
    other = TurnLimiter(turns_per_minute=1, owners=frozenset({"telegram:user/boss"}))
    fire_n(other, 3, sender="telegram:user/boss")
    assert other.check(FIRE, CHAT, "telegram:user/1", T0).action is Action.FIRE


def test_only_firing_decisions_are_limited_or_counted() -> None:
    limiter = TurnLimiter(turns_per_minute=1)
    observe = Decision(Action.OBSERVE, Layer.ROUTE, folder="atlas", topic="")
    for _ in range(5):
        limiter.record(observe, CHAT, "x:y", T0)
    assert limiter.check(FIRE, CHAT, "x:y", T0).action is Action.FIRE
    fire_n(limiter, 1)
    assert limiter.check(observe, CHAT, "x:y", T0) is observe


def test_one_notice_per_ten_minutes() -> None:
    limiter = TurnLimiter(turns_per_minute=1)
    assert limiter.claim_notice(CHAT, T0)
    assert not limiter.claim_notice(CHAT, T0 + timedelta(minutes=9))
    assert limiter.claim_notice("telegram:group/6", T0)
    assert limiter.claim_notice(CHAT, T0 + timedelta(minutes=10))


def test_memory_stays_bounded() -> None:
    limiter = TurnLimiter(turns_per_minute=3)
    fire_n(limiter, 100)
    assert len(limiter._fired[CHAT]) == 3
    for n in range(20_000):
        limiter.record(FIRE, f"x:room/{n}", "x:y", T0 + timedelta(minutes=n // 5_000))
    assert len(limiter._fired) <= 10_001
