"""The worked examples of ROUTING §7 (normative) and the decision objects of INTERFACES §3."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from postroom.core import (
    EMPTY_CHAT,
    Action,
    ChatState,
    CommandKind,
    Decision,
    Layer,
    MessageType,
    RoutingMessage,
)

from routing_helpers import (
    SPEC_FOLDERS,
    SPEC_ROWS,
    SPEC_TABLE,
    T0,
    TTL,
    ChatSim,
    assistant_reply,
    msg,
    run,
    spec_table_without,
    table,
)

# ---------------------------------------------------------------------------------------------
# First table: each message alone, on a fresh chat with no state.


@dataclass(frozen=True)
class Alone:
    chat_jid: str
    content: str
    action: Action
    folder: str
    route_id: int
    topic: str = ""
    verb: str = "message"
    expect_verb: str | None = None


ALONE = [
    pytest.param(
        Alone("telegram:user/12345", "hi", Action.FIRE, "atlas/legal", 1),
        id="telegram-user-12345-row1-beats-row2-by-seq",
    ),
    pytest.param(
        Alone("telegram:group/5", "hi", Action.FIRE, "atlas", 2), id="telegram-group-row2"
    ),
    pytest.param(Alone("discord:dm/9", "hi", Action.FIRE, "atlas/dm", 3), id="discord-dm-row3"),
    pytest.param(
        Alone("discord:guild/sloth/channel/3", "hi", Action.FIRE, "main", 5),
        id="discord-guild-sloth-row5-subtree",
    ),
    pytest.param(
        Alone("discord:guild/77/channel/3", "hi", Action.OBSERVE, "main", 7),
        id="discord-guild-77-observed-row7",
    ),
    pytest.param(
        Alone(
            "discord:guild/77/channel/3",
            "@Postroom hi",
            Action.FIRE,
            "main",
            6,
            expect_verb="mention",
        ),
        id="discord-guild-77-trigger-mention-row6",
    ),
    pytest.param(
        Alone("discord:guild/77/channel/3", "@atlas", Action.OBSERVE, "main", 7),
        id="discord-guild-77-at-atlas-observed-no-command",
    ),
    pytest.param(
        Alone("reddit:subreddit/x", "a post", Action.FIRE, "atlas/posts", 4, verb="post"),
        id="reddit-post-row4",
    ),
    pytest.param(
        Alone("reddit:subreddit/x", "a comment", Action.FIRE, "atlas", 9, verb="reply"),
        id="reddit-reply-catch-all-row9",
    ),
    pytest.param(
        Alone("hook:acme/eng/github", "deployed v1.2", Action.FIRE, "acme/eng", 8, topic="deploy"),
        id="hook-pinned-topic-deploy-row8",
    ),
    pytest.param(
        Alone("slack:T1/channel/C1", "hi", Action.FIRE, "atlas", 9), id="slack-catch-all-row9"
    ),
]


@pytest.mark.parametrize("case", ALONE)
def test_first_table_message_alone(case: Alone) -> None:
    decision = run(msg(case.chat_jid, case.content, verb=case.verb))

    assert decision.action is case.action
    assert decision.layer is Layer.ROUTE
    assert decision.folder == case.folder
    assert decision.topic == case.topic
    assert decision.content == case.content  # no inline prefix applied: content unchanged
    assert decision.inline is None
    assert decision.route_id == case.route_id
    assert decision.ack is None
    assert decision.command is None
    assert decision.drop is None
    assert decision.create_from_template is None
    assert decision.verb == (case.expect_verb or case.verb)


# ---------------------------------------------------------------------------------------------
# Chat telegram:group/5 (H = atlas), engagement disabled, in order.

GROUP = "telegram:group/5"


@dataclass(frozen=True)
class Step:
    message: RoutingMessage
    action: Action
    layer: Layer
    folder: str | None = None
    topic: str | None = None
    content: str | None = None
    inline: str | None = None
    ack: str | None = None
    command: CommandKind | None = None
    route_id: int | None = 2
    #: Chat state expected after the engine applied the decision.
    sticky_group: str | None = None
    sticky_topic: str | None = None


def _fire(
    content: str,
    folder: str,
    *,
    layer: Layer = Layer.ROUTE,
    topic: str = "",
    inline: str | None = None,
    sticky_group: str | None = None,
    sticky_topic: str | None = None,
    routed_content: str | None = None,
    reply: bool = False,
) -> Step:
    message = msg(GROUP, content, reply=assistant_reply("atlas/content") if reply else None)
    return Step(
        message,
        Action.FIRE,
        layer,
        folder=folder,
        topic=topic,
        content=content if routed_content is None else routed_content,
        inline=inline,
        sticky_group=sticky_group,
        sticky_topic=sticky_topic,
    )


def _command(
    content: str,
    ack: str,
    kind: CommandKind,
    *,
    sticky_group: str | None = None,
    sticky_topic: str | None = None,
) -> Step:
    return Step(
        msg(GROUP, content),
        Action.COMMAND,
        Layer.COMMAND,
        ack=ack,
        command=kind,
        sticky_group=sticky_group,
        sticky_topic=sticky_topic,
    )


GROUP_STEPS: list[tuple[str, Step]] = [
    (
        "inline-at-content",
        _fire(
            "@content draft post", "atlas/content", inline="@content", routed_content="draft post"
        ),
    ),
    (
        "reply-chain-to-content",
        _fire("make it shorter", "atlas/content", layer=Layer.REPLY_CHAIN, reply=True),
    ),
    ("hello-back-to-atlas", _fire("hello", "atlas")),
    (
        "sticky-set-atlas-social",
        _command(
            "@atlas/social",
            "routing → atlas/social",
            CommandKind.SET_STICKY,
            sticky_group="atlas/social",
        ),
    ),
    (
        "sticky-fires-social",
        _fire("what's new", "atlas/social", layer=Layer.STICKY, sticky_group="atlas/social"),
    ),
    (
        "sticky-other-refused",
        _command(
            "@other",
            "routing → other refused: not under atlas",
            CommandKind.REFUSE_STICKY,
            sticky_group="atlas/social",
        ),
    ),
    ("sticky-reset", _command("@", "routing reset to default", CommandKind.CLEAR_STICKY)),
    ("at-nosuch-plain-text", _fire("@nosuch hi", "atlas")),
    ("at-everyone-plain-text", _fire("@everyone", "atlas")),
    (
        "sticky-topic-support",
        _command("#support", "topic → support", CommandKind.SET_TOPIC, sticky_topic="support"),
    ),
    (
        "inline-topic-beats-sticky",
        _fire(
            "#billing refund please",
            "atlas",
            topic="billing",
            inline="#billing",
            routed_content="refund please",
            sticky_topic="support",
        ),
    ),
    (
        "sticky-topic-applies",
        _fire("my account is locked", "atlas", topic="support", sticky_topic="support"),
    ),
    ("sticky-topic-reset", _command("#", "topic reset to default", CommandKind.CLEAR_TOPIC)),
    (
        "gateway-message-not-routed",
        Step(
            msg(
                GROUP,
                "here you go",
                sender="bot",
                message_type=MessageType.ASSISTANT,
                is_from_me=True,
            ),
            Action.IGNORE,
            Layer.OWN,
            route_id=None,
        ),
    ),
]


def _replay(steps: list[Step], upto: int) -> tuple[ChatSim, Decision]:
    sim = ChatSim(SPEC_TABLE, set(SPEC_FOLDERS), GROUP, ttl=timedelta(0))
    decision: Decision | None = None
    for i, step in enumerate(steps[: upto + 1]):
        decision = sim.send(step.message, T0 + timedelta(minutes=i))
    assert decision is not None
    return sim, decision


def _check(step: Step, decision: Decision) -> None:
    assert decision.action is step.action
    assert decision.layer is step.layer
    assert decision.folder == step.folder
    assert decision.topic == step.topic
    assert decision.content == step.content
    assert decision.inline == step.inline
    assert decision.ack == step.ack
    assert decision.route_id == step.route_id
    assert (decision.command.kind if decision.command else None) == step.command
    assert decision.drop is None


@pytest.mark.parametrize("index", range(len(GROUP_STEPS)), ids=[name for name, _ in GROUP_STEPS])
def test_group_sequence_engagement_disabled(index: int) -> None:
    steps = [step for _, step in GROUP_STEPS]
    sim, decision = _replay(steps, index)
    step = steps[index]

    _check(step, decision)
    assert sim.state.sticky_group == step.sticky_group
    assert sim.state.sticky_topic == step.sticky_topic
    assert not sim.state.engagements


def test_group_inline_child_leaves_sticky_unchanged() -> None:
    state = ChatState(sticky_group=None, sticky_topic=None)
    decision = run(msg(GROUP, "@content draft post"), chat=state)
    assert decision.command is None  # one message only: sticky state untouched


# ---------------------------------------------------------------------------------------------
# Same chat, engagement TTL 30 minutes.


def test_group_sequence_engagement_ttl_30_minutes() -> None:
    sim = ChatSim(SPEC_TABLE, set(SPEC_FOLDERS), GROUP, ttl=TTL)

    # @content draft post → fire atlas/content; its delivered reply engages (group, "").
    t = T0
    first = sim.send(msg(GROUP, "@content draft post"), t)
    assert (first.action, first.layer, first.folder) == (Action.FIRE, Layer.ROUTE, "atlas/content")
    assert first.content == "draft post"
    sim.reply_delivered(first, t + timedelta(minutes=1))
    assert sim.state.engagements[""].folder == "atlas/content"

    # hello → fire atlas/content (engagement beats the table).
    t += timedelta(minutes=2)
    hello = sim.send(msg(GROUP, "hello"), t)
    assert (hello.action, hello.layer, hello.folder) == (
        Action.FIRE,
        Layer.ENGAGEMENT,
        "atlas/content",
    )
    assert hello.content == "hello"
    assert hello.topic == ""
    assert hello.route_id == 2

    # @atlas/social → ack; the engagement ends.
    t += timedelta(minutes=1)
    sticky = sim.send(msg(GROUP, "@atlas/social"), t)
    assert sticky.action is Action.COMMAND
    assert sticky.ack == "routing → atlas/social"
    assert sticky.command is not None
    assert sticky.command.kind is CommandKind.SET_STICKY
    assert sim.state.sticky_group == "atlas/social"
    assert not sim.state.engagements

    # what's new → fire atlas/social (sticky); its reply engages atlas/social.
    t += timedelta(minutes=1)
    whats_new = sim.send(msg(GROUP, "what's new"), t)
    assert (whats_new.action, whats_new.layer, whats_new.folder) == (
        Action.FIRE,
        Layer.STICKY,
        "atlas/social",
    )
    sim.reply_delivered(whats_new, t)
    assert sim.state.engagements[""].folder == "atlas/social"

    # Right before expiry the engagement still decides.
    almost = sim.send(msg(GROUP, "still there?"), t + TTL - timedelta(seconds=1))
    assert (almost.layer, almost.folder) == (Layer.ENGAGEMENT, "atlas/social")

    # (31 minutes without a reply) hello → fire atlas/social (sticky still set; engagement expired).
    later = sim.send(msg(GROUP, "hello"), t + timedelta(minutes=31))
    assert (later.action, later.layer, later.folder) == (Action.FIRE, Layer.STICKY, "atlas/social")
    assert later.content == "hello"


# ---------------------------------------------------------------------------------------------
# Discord guild with rows 6 and 7: observe / mention / engagement.

GUILD = "discord:guild/77/channel/3"


def test_discord_guild_observe_mention_engagement() -> None:
    sim = ChatSim(table(r for r in SPEC_ROWS if r[0] in (6, 7)), set(SPEC_FOLDERS), GUILD)
    t = T0

    lunch = sim.send(msg(GUILD, "lunch?"), t)
    assert (lunch.action, lunch.layer, lunch.folder, lunch.route_id) == (
        Action.OBSERVE,
        Layer.ROUTE,
        "main",
        7,
    )
    assert lunch.content == "lunch?"
    assert lunch.topic == ""

    t += timedelta(minutes=1)
    summarize = sim.send(msg(GUILD, "@Postroom summarize"), t)
    assert (summarize.action, summarize.layer, summarize.folder, summarize.route_id) == (
        Action.FIRE,
        Layer.ROUTE,
        "main",
        6,
    )
    assert summarize.verb == "mention"
    assert summarize.content == "@Postroom summarize"  # the trigger stays in the content
    sim.reply_delivered(summarize, t + timedelta(seconds=5))

    t += timedelta(minutes=1)
    tomorrow = sim.send(msg(GUILD, "and tomorrow?"), t)
    assert (tomorrow.action, tomorrow.layer, tomorrow.folder) == (
        Action.FIRE,
        Layer.ENGAGEMENT,
        "main",
    )
    assert tomorrow.verb == "message"
    assert tomorrow.route_id == 7  # H came from the #observe row; engagement beats it
    assert tomorrow.content == "and tomorrow?"

    after_ttl = sim.send(msg(GUILD, "anyone?"), t + TTL + timedelta(minutes=1))
    assert (after_ttl.action, after_ttl.layer, after_ttl.folder) == (
        Action.OBSERVE,
        Layer.ROUTE,
        "main",
    )


# ---------------------------------------------------------------------------------------------
# Per-user folders: 0 platform=discord room=guild/* → atlas/{sender}.

CHANNEL = "discord:guild/77/channel/3"
BOB = "discord:user/bob"
ALICE = "discord:user/alice"


def test_per_user_sender_folders() -> None:
    sim = ChatSim(
        table([(1, 0, "platform=discord room=guild/*", "atlas/{sender}")]),
        {"atlas"},
        CHANNEL,
    )
    t = T0

    bob_first = sim.send(msg(CHANNEL, "hi", sender=BOB), t)
    assert (bob_first.action, bob_first.layer, bob_first.folder) == (
        Action.FIRE,
        Layer.ROUTE,
        "atlas/dc-bob",
    )
    assert bob_first.create_from_template == "atlas"
    assert bob_first.route_id == 1
    assert "atlas/dc-bob" in sim.folders

    alice_first = sim.send(msg(CHANNEL, "hello", sender=ALICE), t + timedelta(seconds=10))
    assert (alice_first.action, alice_first.folder) == (Action.FIRE, "atlas/dc-alice")
    assert alice_first.create_from_template == "atlas"

    # Folders exist now: no creation any more.
    bob_again = sim.send(msg(CHANNEL, "question", sender=BOB), t + timedelta(seconds=20))
    assert bob_again.folder == "atlas/dc-bob"
    assert bob_again.create_from_template is None
    # Bob's reply engages the channel to atlas/dc-bob.
    sim.reply_delivered(bob_again, t + timedelta(seconds=30))
    assert sim.state.engagements[""].folder == "atlas/dc-bob"

    # For Alice H = atlas/dc-alice: the engagement layer is skipped (H check).
    alice = sim.send(msg(CHANNEL, "me again", sender=ALICE), t + timedelta(minutes=1))
    assert (alice.action, alice.layer, alice.folder) == (Action.FIRE, Layer.ROUTE, "atlas/dc-alice")
    assert "atlas/dc-bob" in alice.reason  # the trail says which engagement was skipped

    # Bob himself is still engaged.
    bob = sim.send(msg(CHANNEL, "and?", sender=BOB), t + timedelta(minutes=2))
    assert (bob.layer, bob.folder) == (Layer.ENGAGEMENT, "atlas/dc-bob")

    # Bob's @atlas/dc-alice is refused.
    refused = sim.send(msg(CHANNEL, "@atlas/dc-alice", sender=BOB), t + timedelta(minutes=3))
    assert refused.action is Action.COMMAND
    assert refused.layer is Layer.COMMAND
    assert refused.command is not None
    assert refused.command.kind is CommandKind.REFUSE_STICKY
    assert refused.ack == "routing → atlas/dc-alice refused: not under atlas/dc-bob"
    assert sim.state.sticky_group is None


# ---------------------------------------------------------------------------------------------
# INTERFACES §3: the decision objects, exactly.


def test_interfaces_example_inline_child() -> None:
    decision = run(msg(GROUP, "@content draft post"))
    assert decision.with_job(12).to_dict() == {
        "action": "fire",
        "layer": "route",
        "folder": "atlas/content",
        "topic": "",
        "content": "draft post",
        "inline": "@content",
        "route_id": 2,
        "ack": None,
        "job_id": 12,
        "reason": (
            "row 2 (seq 0) matched platform=telegram → atlas; inline @content → atlas/content"
        ),
    }


def test_interfaces_example_sticky_command() -> None:
    decision = run(msg(GROUP, "@atlas/social"))
    assert decision.to_dict() == {
        "action": "command",
        "layer": "command",
        "folder": None,
        "topic": None,
        "content": None,
        "inline": None,
        "route_id": 2,
        "ack": "routing → atlas/social",
        "job_id": None,
        "reason": "sticky group set to atlas/social (under atlas)",
    }


def test_interfaces_example_miss_with_row_9_removed() -> None:
    decision = run(msg("matrix:room/1", "hello"), spec_table_without(9))
    assert decision.to_dict() == {
        "action": "ignore",
        "layer": "miss",
        "folder": None,
        "topic": None,
        "content": None,
        "inline": None,
        "route_id": None,
        "ack": None,
        "job_id": None,
        "reason": "no route matched matrix:room/1",
    }


def test_interfaces_example_own_message() -> None:
    decision = run(msg(GROUP, "an answer", sender="bot", message_type=MessageType.ASSISTANT))
    data = decision.to_dict()
    assert data["action"] == "ignore"
    assert data["layer"] == "own"
    assert {k: data[k] for k in ("folder", "topic", "content", "inline", "route_id", "ack")} == {
        "folder": None,
        "topic": None,
        "content": None,
        "inline": None,
        "route_id": None,
        "ack": None,
    }


def test_decision_dict_has_exactly_the_public_keys() -> None:
    keys = {"action", "layer", "folder", "topic", "content", "inline", "route_id", "ack"}
    keys |= {"job_id", "reason"}
    for message in (msg(GROUP, "hi"), msg(GROUP, "@"), msg("matrix:room/1", "x")):
        assert set(run(message, chat=EMPTY_CHAT).to_dict()) == keys
