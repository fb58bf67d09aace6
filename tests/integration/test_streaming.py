"""An answer shown while it is written (``stream = true``): the events an :class:`AnswerStream`
publishes on the live bus — coalesced, tag-free, restartable, closed with the stored answer's
id — read back the way the web chat and the TUI read them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from postroom.engine.signals import EventBus, Subscription
from postroom.engine.streaming import STREAM_INTERVAL_S, AnswerStream


def stream(bus: EventBus, **kwargs: Any) -> AnswerStream:
    return AnswerStream(
        bus=bus, chat_jid="web:main/anon-1", folder="main", role="agent", job_id=7, **kwargs
    )


async def drain(subscription: Subscription) -> list[dict[str, Any]]:
    """Every event published to *subscription* so far (it is closed: it ends after them)."""
    subscription.close()
    return [event.data async for event in subscription]


def shown_after_each(events: list[dict[str, Any]]) -> list[str]:
    """The text a client shows after each event (``offset`` 0 replaces, else it continues)."""
    text, states = "", []
    for event in events:
        if event["done"]:
            continue
        assert event["offset"] in (0, len(text)), (event, text)
        text = event["text"] if event["offset"] == 0 else text + event["text"]
        states.append(text)
    return states


async def settle() -> None:
    """Let a pending flush run: the timer fires at most one interval after the last write."""
    await asyncio.sleep(STREAM_INTERVAL_S * 2)


async def test_a_fast_writer_is_coalesced_to_one_event_per_interval() -> None:
    bus = EventBus()
    watching = bus.subscribe(kinds=frozenset({"stream"}))
    answer = stream(bus)
    words = [f"word{i} " for i in range(300)]
    began = time.monotonic()
    for word in words:
        answer.write(word)
        await asyncio.sleep(0.002)  # a model writing about 500 pieces a second
    await settle()
    elapsed = time.monotonic() - began
    answer.close("answer-1")
    events = await drain(watching)
    *pieces, done = events
    assert len(pieces) <= elapsed / STREAM_INTERVAL_S + 2, (len(pieces), elapsed)
    assert len(pieces) >= 3  # and it did stream, in several steps
    assert shown_after_each(events)[-1] == "".join(words)
    assert {e["chat_jid"] for e in events} == {"web:main/anon-1"}
    assert {(e["folder"], e["job_id"]) for e in events} == {("main", 7)}
    assert done == {
        "chat_jid": "web:main/anon-1",
        "folder": "main",
        "job_id": 7,
        "offset": len("".join(words)),
        "text": "",
        "done": True,
        "answer_id": "answer-1",
    }


async def test_tags_never_show_and_a_finished_one_is_taken_back() -> None:
    bus = EventBus()
    watching = bus.subscribe(kinds=frozenset({"stream"}))
    answer = stream(bus, interval_s=0.0)
    pieces = ["Noted", " [MEM", "ORY:user_pref", "erence] likes", " tea", "\nAnything", " else?"]
    for piece in pieces:
        answer.write(piece)
        await settle()
    answer.close("a")
    states = shown_after_each(await drain(watching))
    assert states[-1] == "Noted\nAnything else?"
    assert not [s for s in states if "MEM" in s or "tea" in s or "likes" in s], states
    # "Noted " lost its space when the tag was finished: the text was replaced, not continued.
    assert "Noted " in states


async def test_a_restart_clears_the_text_and_a_run_without_answer_says_so() -> None:
    bus = EventBus()
    watching = bus.subscribe(kinds=frozenset({"stream"}))
    answer = stream(bus, interval_s=0.0)
    answer.write("Let me look that up.")
    await settle()
    answer.restart()  # the model called a tool: what it wrote is not the answer
    await settle()
    answer.write("It is sunny.")
    await settle()
    answer.close(None)
    events = await drain(watching)
    assert shown_after_each(events) == ["Let me look that up.", "", "It is sunny."]
    assert events[-1]["done"] is True and events[-1]["answer_id"] is None
    # Closing twice, or writing after the end, publishes nothing more.
    later = bus.subscribe(kinds=frozenset({"stream"}))
    answer.close("late")
    answer.write("more")
    await settle()
    assert await drain(later) == []


async def test_a_run_that_wrote_nothing_publishes_nothing() -> None:
    bus = EventBus()
    watching = bus.subscribe(kinds=frozenset({"stream"}))
    answer = stream(bus)
    answer.close("answer-1")
    await settle()
    assert await drain(watching) == []


async def test_nobody_watching_costs_nothing_and_breaks_nothing() -> None:
    bus = EventBus()
    answer = stream(bus, interval_s=0.0)
    answer.write("unseen")
    await settle()
    watching = bus.subscribe(kinds=frozenset({"stream"}))
    answer.write(" and seen")
    await settle()
    answer.close("a")
    events = await drain(watching)
    # The late subscriber is sent the whole text so far, from offset 0.
    assert shown_after_each(events) == ["unseen and seen"]
