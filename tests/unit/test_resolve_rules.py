"""One or more tests per rule of ROUTING §2 to §5, through :func:`postroom.core.resolution`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from postroom.core import (
    EMPTY_CHAT,
    Action,
    ChatState,
    CommandKind,
    Decision,
    DropReason,
    Engagement,
    Layer,
    MessageType,
    ReplyTarget,
    Trigger,
)

from routing_helpers import (
    SPEC_FOLDERS,
    SPEC_ROWS,
    T0,
    assistant_reply,
    engaged,
    msg,
    run,
    table,
)

GROUP = "telegram:group/5"
GUILD = "discord:guild/77/channel/3"
LATER = T0 + timedelta(minutes=10)
EARLIER = T0 - timedelta(minutes=10)

#: Rows 6 and 7 of §7: mention-only firing plus an #observe catch-all for the guild.
MENTION_PAIR = table(r for r in SPEC_ROWS if r[0] in (6, 7))
#: An #observe catch-all, nothing else.
OBSERVE_ALL = table([(1, 0, "", "main#observe")])


def command_kind(decision: Decision) -> CommandKind | None:
    return decision.command.kind if decision.command else None


def assert_fire(decision: Decision, folder: str, layer: Layer = Layer.ROUTE) -> None:
    assert decision.action is Action.FIRE, decision
    assert decision.layer is layer, decision
    assert decision.folder == folder, decision
    assert decision.command is None
    assert decision.ack is None
    assert decision.drop is None


# ---------------------------------------------------------------------------------------------
# §3: messages the gateway wrote are never routed or steered.

GATEWAY_TYPES = [t for t in MessageType if t is not MessageType.USER]


@pytest.mark.parametrize("message_type", GATEWAY_TYPES, ids=[t.value for t in GATEWAY_TYPES])
@pytest.mark.parametrize("content", ["hello", "@atlas/social", "/new", "#support", "@content x"])
def test_gateway_messages_are_ignored_as_own(message_type: MessageType, content: str) -> None:
    decision = run(msg(GROUP, content, sender="bot", message_type=message_type))
    assert decision.action is Action.IGNORE
    assert decision.layer is Layer.OWN
    assert decision.folder is None
    assert decision.content is None
    assert decision.route_id is None
    assert decision.command is None
    assert decision.ack is None
    assert decision.drop is None  # stored, not dropped
    assert decision.stores_message


@pytest.mark.parametrize("content", ["hello", "@atlas/social", "/chatid"])
def test_user_typed_message_echoed_from_me_is_own(content: str) -> None:
    decision = run(msg(GROUP, content, is_from_me=True))
    assert (decision.action, decision.layer) == (Action.IGNORE, Layer.OWN)
    assert decision.command is None


def test_own_message_is_never_steered_even_with_state() -> None:
    state = ChatState(sticky_group="atlas/social", engagements={"": _eng("atlas/content")})
    decision = run(msg(GROUP, "hi", message_type=MessageType.ASSISTANT), chat=state)
    assert (decision.action, decision.layer, decision.folder) == (Action.IGNORE, Layer.OWN, None)


def _eng(folder: str, until: timedelta = timedelta(minutes=10)) -> Engagement:
    return Engagement(folder, T0 + until)


# ---------------------------------------------------------------------------------------------
# §2: table order, first match wins, {sender} rows skipped on an empty id.


def test_rows_with_equal_seq_are_ordered_by_id_whatever_the_insertion_order() -> None:
    rows = [(2, 0, "", "main"), (1, 0, "", "atlas")]
    decision = run(msg(GROUP), table(rows))
    assert_fire(decision, "atlas")
    assert decision.route_id == 1
    assert run(msg(GROUP), table(reversed(rows))).route_id == 1


def test_lower_seq_wins_and_negative_seq_is_allowed() -> None:
    rows = [(1, 5, "", "main"), (2, -3, "", "atlas"), (3, 0, "", "other")]
    decision = run(msg(GROUP), table(rows))
    assert decision.route_id == 2
    assert decision.folder == "atlas"


def test_first_matching_row_wins_over_later_more_specific_row() -> None:
    rows = [(1, 0, "platform=telegram", "atlas"), (2, 1, "chat_jid=telegram:group/5", "main")]
    assert run(msg(GROUP), table(rows)).route_id == 1


def test_every_test_of_a_match_must_hold() -> None:
    rows = [(1, 0, "platform=telegram room=user/*", "atlas"), (2, 1, "", "main")]
    assert run(msg(GROUP), table(rows)).route_id == 2
    assert run(msg("telegram:user/9"), table(rows)).route_id == 1


@pytest.mark.parametrize("sender", ["", "x:///", "telegram:user/", "x:...", "discord:user/!!!"])
def test_sender_row_skipped_on_empty_id_and_evaluation_continues(sender: str) -> None:
    rows = [(1, 0, "", "atlas/{sender}"), (2, 1, "", "main")]
    decision = run(msg(GROUP, sender=sender), table(rows))
    assert_fire(decision, "main")
    assert decision.route_id == 2
    assert decision.create_from_template is None


def test_only_sender_rows_and_empty_id_is_a_miss() -> None:
    decision = run(msg(GROUP, sender="x:///"), table([(1, 0, "", "atlas/{sender}")]))
    assert (decision.action, decision.layer, decision.drop) == (
        Action.IGNORE,
        Layer.MISS,
        DropReason.NO_ROUTE,
    )
    assert decision.route_id is None


def test_sender_row_wins_when_id_is_not_empty() -> None:
    rows = [(1, 0, "", "atlas/{sender}"), (2, 1, "", "main")]
    decision = run(msg(GROUP, sender="telegram:user/42"), table(rows), folders={"atlas", "main"})
    assert_fire(decision, "atlas/tg-42")
    assert decision.route_id == 1


# ---------------------------------------------------------------------------------------------
# §2.3: template folders are created when a message fires into them, never when observed.


def test_template_folder_created_on_first_fire() -> None:
    rows = [(1, 0, "platform=telegram", "atlas/{sender}")]
    decision = run(msg(GROUP, sender="telegram:user/42"), table(rows), folders={"atlas"})
    assert_fire(decision, "atlas/tg-42")
    assert decision.create_from_template == "atlas"


def test_template_folder_not_created_again_when_it_exists() -> None:
    rows = [(1, 0, "platform=telegram", "atlas/{sender}")]
    folders = {"atlas", "atlas/tg-42"}
    decision = run(msg(GROUP, sender="telegram:user/42"), table(rows), folders=folders)
    assert_fire(decision, "atlas/tg-42")
    assert decision.create_from_template is None


def test_template_folder_not_created_for_observed_message() -> None:
    rows = [(1, 0, "platform=telegram", "atlas/{sender}#observe")]
    decision = run(msg(GROUP, sender="telegram:user/42"), table(rows), folders={"atlas"})
    assert decision.action is Action.OBSERVE
    assert decision.folder == "atlas/tg-42"
    assert decision.create_from_template is None


def test_sticky_outside_a_template_h_is_skipped_and_h_is_created() -> None:
    rows = [(1, 0, "platform=telegram", "atlas/{sender}")]
    state = ChatState(sticky_group="atlas/social")
    decision = run(
        msg(GROUP, sender="telegram:user/42"),
        table(rows),
        chat=state,
        folders={"atlas", "atlas/social"},
    )
    # atlas/social is not under H = atlas/tg-42: the sticky layer is skipped, H fires.
    assert_fire(decision, "atlas/tg-42")
    assert decision.create_from_template == "atlas"


def test_template_with_pinned_topic_fires_with_topic_and_creates() -> None:
    rows = [(1, 0, "platform=telegram", "atlas/{sender}#support")]
    decision = run(msg(GROUP, sender="telegram:user/42"), table(rows), folders={"atlas"})
    assert_fire(decision, "atlas/tg-42")
    assert decision.topic == "support"
    assert decision.create_from_template == "atlas"


# ---------------------------------------------------------------------------------------------
# §2.2 / §3.3: folder_missing drops.


@pytest.mark.parametrize("target", ["gone", "gone#observe", "gone#deploy", "atlas/gone"])
def test_deleted_target_folder_drops_with_folder_missing(target: str) -> None:
    decision = run(msg(GROUP), table([(1, 0, "", target)]), folders={"atlas", "main"})
    assert decision.action is Action.IGNORE
    assert decision.layer is Layer.MISS
    assert decision.drop is DropReason.FOLDER_MISSING
    assert decision.folder is None
    assert decision.content is None
    assert not decision.stores_message


def test_missing_template_parent_drops_with_folder_missing() -> None:
    rows = [(1, 0, "", "atlas/{sender}")]
    decision = run(msg(GROUP, sender="telegram:user/42"), table(rows), folders={"main"})
    assert (decision.action, decision.layer) == (Action.IGNORE, Layer.MISS)
    assert decision.drop is DropReason.FOLDER_MISSING
    assert decision.create_from_template is None


# ---------------------------------------------------------------------------------------------
# §3 step 1 / §3.3: misses.


def test_miss_is_ignored_and_dropped_with_no_route() -> None:
    decision = run(msg("matrix:room/1", "hello"), table([(1, 0, "platform=telegram", "atlas")]))
    assert decision.action is Action.IGNORE
    assert decision.layer is Layer.MISS
    assert decision.route_id is None
    assert decision.folder is None
    assert decision.topic is None
    assert decision.content is None
    assert decision.drop is DropReason.NO_ROUTE
    assert not decision.stores_message
    assert decision.reason == "no route matched matrix:room/1"


def test_empty_table_misses_everything() -> None:
    decision = run(msg(GROUP), table([]))
    assert (decision.layer, decision.drop) == (Layer.MISS, DropReason.NO_ROUTE)


def test_chatid_is_answered_on_a_miss_and_recorded_as_a_drop() -> None:
    decision = run(msg("matrix:room/1", "/chatid"), table([]))
    assert decision.layer is Layer.MISS
    assert decision.drop is DropReason.NO_ROUTE
    assert command_kind(decision) is CommandKind.CHATID
    assert decision.ack is not None
    assert "matrix:room/1" in decision.ack
    assert decision.route_id is None
    assert decision.folder is None


@pytest.mark.parametrize("content", ["/new", "/stop", "/status", "@", "@atlas", "#support", "#"])
def test_other_commands_are_not_answered_on_a_miss(content: str) -> None:
    decision = run(msg("matrix:room/1", content), table([]))
    assert (decision.action, decision.layer) == (Action.IGNORE, Layer.MISS)
    assert decision.command is None
    assert decision.ack is None
    assert decision.drop is DropReason.NO_ROUTE


# ---------------------------------------------------------------------------------------------
# §3 step 0: operator chats.


def test_operator_chat_fires_its_folder_without_consulting_the_table() -> None:
    decision = run(msg("tui:atlas/content", "hi"), table([]))
    assert_fire(decision, "atlas/content", Layer.OPERATOR)
    assert decision.route_id is None
    assert decision.content == "hi"
    assert decision.topic == ""


def test_operator_chat_ignores_a_table_that_would_route_elsewhere() -> None:
    rows = [(1, -100, "", "main"), (2, 0, "platform=tui", "other")]
    decision = run(msg("tui:atlas", "hi"), table(rows))
    assert_fire(decision, "atlas", Layer.OPERATOR)
    assert decision.route_id is None


@pytest.mark.parametrize("chat_jid", ["tui:nosuch", "tui:", "tui:atlas/nosuch"])
def test_operator_chat_naming_no_folder_is_dropped(chat_jid: str) -> None:
    decision = run(msg(chat_jid, "hi"), table([(1, 0, "", "atlas")]))
    assert (decision.action, decision.layer) == (Action.IGNORE, Layer.MISS)
    assert decision.drop is DropReason.FOLDER_MISSING


def test_operator_chat_layers_apply_sticky() -> None:
    state = ChatState(sticky_group="atlas/social")
    decision = run(msg("tui:atlas", "hi"), table([]), chat=state)
    assert_fire(decision, "atlas/social", Layer.STICKY)


def test_operator_chat_layers_apply_engagement_and_h_check() -> None:
    inside = run(msg("tui:atlas", "hi"), table([]), chat=engaged("atlas/content", LATER))
    assert_fire(inside, "atlas/content", Layer.ENGAGEMENT)
    outside = run(msg("tui:atlas", "hi"), table([]), chat=engaged("main", LATER))
    assert_fire(outside, "atlas", Layer.OPERATOR)


def test_operator_chat_honours_commands_and_inline() -> None:
    sticky = run(msg("tui:atlas", "@social"), table([]))
    assert command_kind(sticky) is CommandKind.SET_STICKY
    assert sticky.ack == "routing → atlas/social"
    assert sticky.route_id is None
    refused = run(msg("tui:atlas", "@other"), table([]))
    assert refused.ack == "routing → other refused: not under atlas"
    new = run(msg("tui:atlas", "/new"), table([]))
    assert command_kind(new) is CommandKind.NEW
    inline = run(msg("tui:atlas", "@content draft"), table([]))
    assert_fire(inline, "atlas/content", Layer.OPERATOR)
    assert inline.content == "draft"


# ---------------------------------------------------------------------------------------------
# §3 step 2: the topic.

SLACK = "slack:T1/channel/C1"
SLACK_TS = "1712345678.123456"
PINNED = table([(1, 0, "platform=slack", "atlas#pinned")])
UNPINNED = table([(1, 0, "platform=slack", "atlas")])


def test_topic_inline_beats_sticky_pinned_and_native() -> None:
    state = ChatState(sticky_topic="support")
    decision = run(msg(SLACK, "#billing refund", native_topic=SLACK_TS), PINNED, chat=state)
    assert decision.topic == "billing"
    assert decision.inline == "#billing"
    assert decision.content == "refund"


def test_topic_sticky_beats_pinned_and_native() -> None:
    state = ChatState(sticky_topic="support")
    decision = run(msg(SLACK, "hi", native_topic=SLACK_TS), PINNED, chat=state)
    assert decision.topic == "support"
    assert decision.inline is None


def test_topic_pinned_beats_native() -> None:
    decision = run(msg(SLACK, "hi", native_topic=SLACK_TS), PINNED)
    assert decision.topic == "pinned"


def test_topic_native_is_normalized() -> None:
    decision = run(msg(SLACK, "hi", native_topic=SLACK_TS), UNPINNED)
    assert decision.topic == "1712345678-123456"


def test_topic_native_is_lowercased() -> None:
    assert run(msg(SLACK, "hi", native_topic="Forum_7"), UNPINNED).topic == "forum_7"


def test_topic_defaults_to_empty() -> None:
    decision = run(msg(SLACK, "hi"), UNPINNED)
    assert decision.topic == ""


def test_observed_message_keeps_native_topic() -> None:
    decision = run(msg(GUILD, "lunch?", native_topic=SLACK_TS), MENTION_PAIR)
    assert decision.action is Action.OBSERVE
    assert decision.topic == "1712345678-123456"


@pytest.mark.parametrize(
    "content", ["#bill.ing refund please", "#bill!ing refund", "#été refund", "#a#b refund"]
)
def test_typed_topic_outside_the_alphabet_stays_plain_text(content: str) -> None:
    decision = run(msg(GROUP, content))
    assert_fire(decision, "atlas")
    assert decision.topic == ""
    assert decision.inline is None
    assert decision.content == content


@pytest.mark.parametrize("content", ["#bill.ing", "#a.b", "#Été"])
def test_single_token_invalid_topic_is_not_a_command(content: str) -> None:
    decision = run(msg(GROUP, content))
    assert_fire(decision, "atlas")
    assert decision.content == content
    assert decision.topic == ""


def test_typed_topic_is_lowercased() -> None:
    inline = run(msg(GROUP, "#Billing refund"))
    assert (inline.topic, inline.inline, inline.content) == ("billing", "#billing", "refund")
    sticky = run(msg(GROUP, "#Support"))
    assert command_kind(sticky) is CommandKind.SET_TOPIC
    assert sticky.ack == "topic → support"


# ---------------------------------------------------------------------------------------------
# §3 step 3.1 / §4: engagement.


def test_engagement_beats_the_table() -> None:
    decision = run(msg(GROUP, "hello"), chat=engaged("atlas/content", LATER))
    assert_fire(decision, "atlas/content", Layer.ENGAGEMENT)
    assert decision.route_id == 2
    assert decision.content == "hello"


def test_expired_engagement_is_ignored() -> None:
    decision = run(msg(GROUP, "hello"), chat=engaged("atlas/content", EARLIER))
    assert_fire(decision, "atlas", Layer.ROUTE)


def test_engagement_beats_observe() -> None:
    decision = run(msg(GUILD, "and tomorrow?"), OBSERVE_ALL, chat=engaged("main", LATER))
    assert_fire(decision, "main", Layer.ENGAGEMENT)
    assert decision.route_id == 1


def test_engagement_is_looked_up_for_the_messages_topic() -> None:
    state = engaged("atlas/content", LATER, topic="billing")
    in_topic = run(msg(GROUP, "hello", native_topic="billing"), chat=state)
    assert_fire(in_topic, "atlas/content", Layer.ENGAGEMENT)
    assert in_topic.topic == "billing"
    # A message without a topic is not engaged by a topic's engagement.
    no_topic = run(msg(GROUP, "hello"), chat=state)
    assert_fire(no_topic, "atlas", Layer.ROUTE)
    # Nor is a message in another topic.
    other = run(msg(GROUP, "hello", native_topic="sales"), chat=state)
    assert_fire(other, "atlas", Layer.ROUTE)


def test_engagement_lookup_uses_inline_and_sticky_topics() -> None:
    state = engaged("atlas/content", LATER, topic="billing")
    inline = run(msg(GROUP, "#billing refund"), chat=state)
    assert_fire(inline, "atlas/content", Layer.ENGAGEMENT)
    assert inline.content == "refund"
    sticky = run(
        msg(GROUP, "hello"), chat=ChatState(sticky_topic="billing", engagements=state.engagements)
    )
    assert_fire(sticky, "atlas/content", Layer.ENGAGEMENT)
    assert sticky.topic == "billing"


def test_engagement_falls_back_to_the_chat_as_a_whole() -> None:
    decision = run(msg(GROUP, "hello", native_topic="sales"), chat=engaged("atlas/content", LATER))
    assert_fire(decision, "atlas/content", Layer.ENGAGEMENT)
    assert decision.topic == "sales"


def test_engagement_topic_specific_beats_chat_wide() -> None:
    state = ChatState(
        engagements={"": _eng("atlas/social"), "billing": _eng("atlas/content")},
    )
    decision = run(msg(GROUP, "hello", native_topic="billing"), chat=state)
    assert_fire(decision, "atlas/content", Layer.ENGAGEMENT)


def test_expired_topic_engagement_falls_back_to_live_chat_wide_one() -> None:
    state = ChatState(
        engagements={
            "": _eng("atlas/social"),
            "billing": _eng("atlas/content", timedelta(minutes=-1)),
        },
    )
    decision = run(msg(GROUP, "hello", native_topic="billing"), chat=state)
    assert_fire(decision, "atlas/social", Layer.ENGAGEMENT)


def test_engagement_outside_h_is_skipped() -> None:
    decision = run(msg(GROUP, "hello"), chat=engaged("main", LATER))
    assert_fire(decision, "atlas", Layer.ROUTE)


def test_engagement_outside_h_does_not_beat_observe() -> None:
    decision = run(msg(GUILD, "hi"), OBSERVE_ALL, chat=engaged("atlas", LATER))
    assert decision.action is Action.OBSERVE
    assert decision.folder == "main"


def test_engagement_to_a_vanished_folder_is_skipped() -> None:
    decision = run(msg(GROUP, "hello"), chat=engaged("atlas/gone", LATER))
    assert_fire(decision, "atlas", Layer.ROUTE)


def test_engagement_to_h_itself_is_allowed() -> None:
    decision = run(msg(GROUP, "hello"), chat=engaged("atlas", LATER))
    assert_fire(decision, "atlas", Layer.ENGAGEMENT)


def test_engagement_beats_reply_chain_and_sticky() -> None:
    state = ChatState(sticky_group="atlas/social", engagements={"": _eng("atlas/legal")})
    message = msg(GROUP, "hi", reply=assistant_reply("atlas/content"))
    assert_fire(run(message, chat=state), "atlas/legal", Layer.ENGAGEMENT)


def test_h_check_uses_the_prefix_of_whole_segments() -> None:
    # atlas-old is not inside atlas even though its name starts with it.
    folders = SPEC_FOLDERS | {"atlas-old"}
    decision = run(msg(GROUP, "hi"), chat=engaged("atlas-old", LATER), folders=folders)
    assert_fire(decision, "atlas", Layer.ROUTE)


# ---------------------------------------------------------------------------------------------
# §3 step 3.2: the reply chain.


def test_reply_to_gateway_message_goes_to_its_folder() -> None:
    decision = run(msg(GROUP, "make it shorter", reply=assistant_reply("atlas/content")))
    assert_fire(decision, "atlas/content", Layer.REPLY_CHAIN)
    assert decision.verb == "mention"


def test_reply_chain_takes_the_replied_to_topic() -> None:
    state = ChatState(sticky_topic="support")
    message = msg(GROUP, "shorter", reply=assistant_reply("atlas/content", topic="drafts"))
    decision = run(message, chat=state)
    assert_fire(decision, "atlas/content", Layer.REPLY_CHAIN)
    assert decision.topic == "drafts"


def test_reply_chain_topic_yields_to_inline_topic() -> None:
    message = msg(GROUP, "#billing shorter", reply=assistant_reply("atlas/content", topic="x"))
    decision = run(message)
    assert_fire(decision, "atlas/content", Layer.REPLY_CHAIN)
    assert (decision.topic, decision.inline, decision.content) == ("billing", "#billing", "shorter")


def test_reply_chain_beats_sticky() -> None:
    state = ChatState(sticky_group="atlas/social")
    decision = run(msg(GROUP, "ok", reply=assistant_reply("atlas/content")), chat=state)
    assert_fire(decision, "atlas/content", Layer.REPLY_CHAIN)


def test_reply_chain_beats_observe() -> None:
    decision = run(msg(GUILD, "thanks", reply=assistant_reply("main")), OBSERVE_ALL)
    assert_fire(decision, "main", Layer.REPLY_CHAIN)


def test_reply_chain_outside_h_is_skipped() -> None:
    decision = run(msg(GROUP, "ok", reply=assistant_reply("main")))
    assert_fire(decision, "atlas", Layer.ROUTE)


def test_reply_chain_to_a_vanished_folder_is_skipped() -> None:
    decision = run(msg(GROUP, "ok", reply=assistant_reply("atlas/gone")))
    assert_fire(decision, "atlas", Layer.ROUTE)


def test_reply_to_a_user_message_is_not_a_reply_chain() -> None:
    reply = ReplyTarget(MessageType.USER, False, "atlas/content", "x")
    decision = run(msg(GROUP, "me too", reply=reply))
    assert_fire(decision, "atlas", Layer.ROUTE)
    assert decision.verb == "message"
    assert decision.topic == ""


def test_reply_to_a_user_message_in_an_observed_chat_stays_observed() -> None:
    reply = ReplyTarget(MessageType.USER, False, "main", "")
    decision = run(msg(GUILD, "me too", reply=reply), MENTION_PAIR)
    assert decision.action is Action.OBSERVE


# ---------------------------------------------------------------------------------------------
# §3 step 3.3: observe stops everything after it.


@pytest.mark.parametrize(
    "content",
    ["@", "@x", "@main/x", "#", "#support", "/new", "/stop", "/status", "/chatid"],
)
def test_commands_are_not_honoured_when_the_message_would_only_be_observed(content: str) -> None:
    decision = run(msg(GUILD, content), OBSERVE_ALL, folders={"main", "main/x"})
    assert decision.action is Action.OBSERVE
    assert decision.layer is Layer.ROUTE
    assert decision.folder == "main"
    assert decision.content == content
    assert decision.command is None
    assert decision.ack is None


@pytest.mark.parametrize("content", ["@x draft", "#billing refund"])
def test_inline_prefixes_do_not_apply_to_observed_messages(content: str) -> None:
    decision = run(msg(GUILD, content), OBSERVE_ALL, folders={"main", "main/x"})
    assert decision.action is Action.OBSERVE
    assert decision.folder == "main"
    assert decision.content == content
    assert decision.inline is None
    assert decision.topic == ""


def test_sticky_group_does_not_apply_to_observed_messages() -> None:
    state = ChatState(sticky_group="main/x")
    decision = run(msg(GUILD, "hi"), OBSERVE_ALL, chat=state, folders={"main", "main/x"})
    assert decision.action is Action.OBSERVE
    assert decision.folder == "main"


def test_observed_message_is_not_a_miss() -> None:
    decision = run(msg(GUILD, "hi"), OBSERVE_ALL, folders={"main"})
    assert decision.drop is None
    assert decision.stores_message
    assert decision.route_id == 1


def test_commands_are_honoured_when_engagement_makes_an_observed_message_fire() -> None:
    decision = run(msg(GUILD, "/new"), OBSERVE_ALL, chat=engaged("main", LATER))
    assert decision.action is Action.COMMAND
    assert command_kind(decision) is CommandKind.NEW
    assert decision.command is not None
    assert decision.command.folder == "main"


# ---------------------------------------------------------------------------------------------
# §3 step 3.4: the sticky group.


def test_sticky_group_fires_its_folder() -> None:
    decision = run(msg(GROUP, "what's new"), chat=ChatState(sticky_group="atlas/social"))
    assert_fire(decision, "atlas/social", Layer.STICKY)
    assert decision.route_id == 2


def test_sticky_group_outside_h_is_skipped() -> None:
    decision = run(msg(GROUP, "hi"), chat=ChatState(sticky_group="other"))
    assert_fire(decision, "atlas", Layer.ROUTE)


def test_sticky_group_of_another_chats_h_is_skipped_after_table_change() -> None:
    # The sticky was set while H was atlas; now the chat routes to main.
    rows = [(1, 0, "platform=telegram", "main")]
    decision = run(msg(GROUP, "hi"), table(rows), chat=ChatState(sticky_group="atlas/social"))
    assert_fire(decision, "main", Layer.ROUTE)


def test_sticky_group_to_a_vanished_folder_is_skipped() -> None:
    decision = run(msg(GROUP, "hi"), chat=ChatState(sticky_group="atlas/gone"))
    assert_fire(decision, "atlas", Layer.ROUTE)


def test_route_fires_with_its_pinned_topic() -> None:
    decision = run(msg("hook:acme/eng/github", "deployed"))
    assert_fire(decision, "acme/eng")
    assert decision.topic == "deploy"


# ---------------------------------------------------------------------------------------------
# §3.1: steering commands.


def test_sticky_command_tries_relative_to_h_first() -> None:
    folders = {"atlas", "atlas/social", "social"}
    decision = run(msg(GROUP, "@social"), folders=folders)
    assert command_kind(decision) is CommandKind.SET_STICKY
    assert decision.command is not None
    assert decision.command.folder == "atlas/social"
    assert decision.ack == "routing → atlas/social"


def test_sticky_command_relative_path_wins_over_an_equal_full_path() -> None:
    folders = {"atlas", "atlas/social", "atlas/atlas", "atlas/atlas/social"}
    decision = run(msg(GROUP, "@atlas/social"), folders=folders)
    assert decision.ack == "routing → atlas/atlas/social"


def test_sticky_command_falls_back_to_the_full_path() -> None:
    decision = run(msg(GROUP, "@atlas/social"))
    assert command_kind(decision) is CommandKind.SET_STICKY
    assert decision.ack == "routing → atlas/social"


def test_sticky_command_to_h_itself_is_accepted() -> None:
    decision = run(msg(GROUP, "@atlas"))
    assert command_kind(decision) is CommandKind.SET_STICKY
    assert decision.ack == "routing → atlas"


def test_sticky_command_outside_h_is_refused() -> None:
    decision = run(msg(GROUP, "@social"), folders={"atlas", "social"})
    assert decision.action is Action.COMMAND
    assert command_kind(decision) is CommandKind.REFUSE_STICKY
    assert decision.ack == "routing → social refused: not under atlas"
    assert decision.folder is None
    assert decision.content is None


def test_sticky_command_outside_h_refused_for_sibling_prefix() -> None:
    decision = run(msg(GROUP, "@atlas-old"), folders=SPEC_FOLDERS | {"atlas-old"})
    assert command_kind(decision) is CommandKind.REFUSE_STICKY


@pytest.mark.parametrize("content", ["@everyone", "@sloth", "@atlas/nosuch", "@nosuch/x"])
def test_at_path_naming_no_folder_is_plain_text(content: str) -> None:
    decision = run(msg(GROUP, content))
    assert_fire(decision, "atlas")
    assert decision.content == content
    assert decision.inline is None


def test_sticky_command_trimmed_whole_message() -> None:
    decision = run(msg(GROUP, "  @atlas/social \n"))
    assert command_kind(decision) is CommandKind.SET_STICKY


def test_at_path_followed_by_text_is_not_a_command() -> None:
    decision = run(msg(GROUP, "@atlas/social please"))
    assert_fire(decision, "atlas")
    assert decision.content == "@atlas/social please"


def test_at_alone_clears_sticky() -> None:
    decision = run(msg(GROUP, "@"), chat=ChatState(sticky_group="atlas/social"))
    assert decision.action is Action.COMMAND
    assert decision.layer is Layer.COMMAND
    assert command_kind(decision) is CommandKind.CLEAR_STICKY
    assert decision.ack == "routing reset to default"


def test_hash_alone_clears_sticky_topic() -> None:
    decision = run(msg(GROUP, "#"), chat=ChatState(sticky_topic="support"))
    assert command_kind(decision) is CommandKind.CLEAR_TOPIC
    assert decision.ack == "topic reset to default"


def test_hash_topic_sets_sticky_topic() -> None:
    decision = run(msg(GROUP, "#support"))
    assert decision.action is Action.COMMAND
    assert command_kind(decision) is CommandKind.SET_TOPIC
    assert decision.command is not None
    assert decision.command.topic == "support"
    assert decision.ack == "topic → support"


def test_sticky_command_in_sticky_chat_is_relative_to_h_not_the_sticky() -> None:
    # H = atlas; the sticky is atlas/social; @content means atlas/content.
    decision = run(msg(GROUP, "@content"), chat=ChatState(sticky_group="atlas/social"))
    assert decision.ack == "routing → atlas/content"


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        ("/new", CommandKind.NEW),
        ("/stop", CommandKind.STOP),
        ("/status", CommandKind.STATUS),
        ("/chatid", CommandKind.CHATID),
    ],
)
def test_slash_commands_are_consumed(content: str, kind: CommandKind) -> None:
    decision = run(msg(GROUP, content))
    assert decision.action is Action.COMMAND
    assert decision.layer is Layer.COMMAND
    assert command_kind(decision) is kind
    assert decision.folder is None
    assert decision.content is None
    assert decision.route_id == 2


@pytest.mark.parametrize("content", ["/new", "/stop", "/status"])
def test_conversation_commands_name_the_resolved_folder_and_topic(content: str) -> None:
    state = ChatState(sticky_group="atlas/social", sticky_topic="support")
    decision = run(msg(GROUP, content), chat=state)
    assert decision.command is not None
    assert decision.command.folder == "atlas/social"
    assert decision.command.topic == "support"


def test_chatid_answers_the_chat_jid() -> None:
    decision = run(msg(GROUP, "/chatid"))
    assert decision.ack is not None
    assert GROUP in decision.ack


@pytest.mark.parametrize("content", ["/new please", "/unknown", "/new now!", "/ new"])
def test_slash_text_that_is_not_a_command_fires_as_text(content: str) -> None:
    decision = run(msg(GROUP, content))
    assert_fire(decision, "atlas")
    assert decision.content == content


BOT = Trigger(bot_usernames=("postroom_bot",))


def test_slash_command_addressed_to_this_bot_is_accepted_and_is_a_mention() -> None:
    decision = run(msg(GROUP, "/new@postroom_bot"), trigger=BOT)
    assert command_kind(decision) is CommandKind.NEW
    assert decision.verb == "mention"


def test_slash_command_addressed_to_another_bot_is_plain_text() -> None:
    decision = run(msg(GROUP, "/new@otherbot"), trigger=BOT)
    assert_fire(decision, "atlas")
    assert decision.content == "/new@otherbot"
    assert decision.verb == "message"


def test_slash_command_addressed_to_unknown_username_without_config_is_plain_text() -> None:
    decision = run(msg(GROUP, "/status@postroom_bot"))
    assert_fire(decision, "atlas")


def test_addressed_command_turns_an_observed_guild_message_into_a_mention_command() -> None:
    addressed = run(msg(GUILD, "/new@postroom_bot"), MENTION_PAIR, trigger=BOT)
    assert command_kind(addressed) is CommandKind.NEW
    assert addressed.route_id == 6
    bare = run(msg(GUILD, "/new"), MENTION_PAIR, trigger=BOT)
    assert bare.action is Action.OBSERVE
    assert bare.route_id == 7


def test_chatid_on_a_miss_with_addressed_command() -> None:
    decision = run(msg("matrix:room/1", "/chatid@postroom_bot"), table([]), trigger=BOT)
    assert command_kind(decision) is CommandKind.CHATID
    assert decision.drop is DropReason.NO_ROUTE


# ---------------------------------------------------------------------------------------------
# §3.1 "After the trigger", and ``\\cmd``.


@pytest.mark.parametrize(
    ("content", "kind", "ack"),
    [
        ("@Postroom /new", CommandKind.NEW, "new conversation with main"),
        ("@ghost /status", CommandKind.STATUS, None),
        ("@Postroom \\stop", CommandKind.STOP, None),
        ("@Postroom, /chatid", CommandKind.CHATID, f"chat id: {GUILD}"),
        ("@ghost @main", CommandKind.SET_STICKY, "routing → main"),
        ("@Postroom @", CommandKind.CLEAR_STICKY, "routing reset to default"),
        ("@Postroom #support", CommandKind.SET_TOPIC, "topic → support"),
        ("@Postroom #", CommandKind.CLEAR_TOPIC, "topic reset to default"),
    ],
)
def test_a_command_after_the_trigger_is_honoured_in_a_mention_only_chat(
    content: str, kind: CommandKind, ack: str | None
) -> None:
    decision = run(msg(GUILD, content), MENTION_PAIR)
    assert (decision.action, decision.layer) == (Action.COMMAND, Layer.COMMAND)
    assert command_kind(decision) is kind
    assert decision.verb == "mention"
    assert decision.route_id == 6
    if ack is not None:
        assert decision.ack == ack
    # Without the trigger the same text would only be observed: no command.
    bare = run(msg(GUILD, content.split()[-1]), MENTION_PAIR)
    assert (bare.action, bare.route_id, bare.command) == (Action.OBSERVE, 7, None)


def test_the_trigger_and_a_sticky_path_of_the_spec_example() -> None:
    decision = run(msg(GROUP, "@ghost @atlas/social"))
    assert command_kind(decision) is CommandKind.SET_STICKY
    assert decision.ack == "routing → atlas/social"


def test_the_trigger_and_a_path_naming_no_folder_is_plain_text() -> None:
    decision = run(msg(GROUP, "@ghost @nosuch"))
    assert_fire(decision, "atlas")
    assert decision.content == "@ghost @nosuch"
    assert decision.verb == "mention"


def test_the_trigger_and_a_folder_outside_h_is_refused() -> None:
    decision = run(msg(GROUP, "@Postroom @other"))
    assert command_kind(decision) is CommandKind.REFUSE_STICKY
    assert decision.ack == "routing → other refused: not under atlas"


@pytest.mark.parametrize(
    "content", ["@Postroom /new please", "@Postroom /help", "hey @Postroom /new"]
)
def test_the_trigger_and_more_than_a_command_fires_as_text(content: str) -> None:
    decision = run(msg(GROUP, content))
    assert_fire(decision, "atlas")
    assert decision.content == content


def test_chatid_after_the_trigger_is_answered_on_a_miss() -> None:
    decision = run(msg("matrix:room/1", "@Postroom /chatid"), table([]))
    assert command_kind(decision) is CommandKind.CHATID
    assert decision.ack == "chat id: matrix:room/1"
    assert decision.drop is DropReason.NO_ROUTE


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        ("\\new", CommandKind.NEW),
        ("\\stop", CommandKind.STOP),
        ("\\status", CommandKind.STATUS),
        ("\\chatid", CommandKind.CHATID),
    ],
)
def test_a_backslash_command_is_the_slash_command(content: str, kind: CommandKind) -> None:
    slash = run(msg(GROUP, "/" + content[1:]))
    decision = run(msg(GROUP, content))
    assert command_kind(decision) is command_kind(slash) is kind
    assert (decision.ack, decision.command) == (slash.ack, slash.command)


def test_an_addressed_backslash_command_is_a_mention_command() -> None:
    decision = run(msg(GUILD, "\\new@postroom_bot"), MENTION_PAIR, trigger=BOT)
    assert command_kind(decision) is CommandKind.NEW
    assert decision.route_id == 6


def test_a_slack_mention_turned_into_the_trigger_works_as_a_command() -> None:
    # The Slack adapter turns "<@BOT> /new" into "@Postroom /new" and marks it mentioned.
    rows = [
        (1, 0, "platform=slack verb=mention", "main"),
        (2, 10, "platform=slack", "main#observe"),
    ]
    decision = run(msg("slack:T1/channel/C1", "@Postroom /new", mentioned=True), table(rows))
    assert command_kind(decision) is CommandKind.NEW
    assert decision.route_id == 1


# ---------------------------------------------------------------------------------------------
# §3 step 4: inline prefixes.


def test_inline_child_folder() -> None:
    decision = run(msg(GROUP, "@content draft post"))
    assert_fire(decision, "atlas/content")
    assert (decision.inline, decision.content) == ("@content", "draft post")


def test_inline_child_name_is_looked_up_lowercased() -> None:
    decision = run(msg(GROUP, "@Content draft post"))
    assert decision.folder == "atlas/content"
    assert decision.content == "draft post"


def test_inline_child_after_leading_whitespace() -> None:
    decision = run(msg(GROUP, "  @content draft post"))
    assert decision.folder == "atlas/content"
    assert decision.content == "draft post"


def test_inline_child_is_relative_to_the_layer_folder() -> None:
    folders = SPEC_FOLDERS | {"atlas/social/drafts"}
    state = ChatState(sticky_group="atlas/social")
    decision = run(msg(GROUP, "@drafts hello"), chat=state, folders=folders)
    assert_fire(decision, "atlas/social/drafts", Layer.STICKY)
    assert (decision.inline, decision.content) == ("@drafts", "hello")


def test_inline_child_not_existing_under_layer_folder_is_plain_text() -> None:
    # atlas/content exists, but the layer chose atlas/social: atlas/social/content does not.
    state = ChatState(sticky_group="atlas/social")
    decision = run(msg(GROUP, "@content draft"), chat=state)
    assert_fire(decision, "atlas/social", Layer.STICKY)
    assert decision.content == "@content draft"
    assert decision.inline is None


def test_inline_child_does_not_touch_sticky_state() -> None:
    decision = run(msg(GROUP, "@content draft"), chat=ChatState(sticky_group="atlas"))
    assert decision.command is None


def test_inline_name_with_slash_is_not_an_inline_prefix() -> None:
    decision = run(msg(GROUP, "@atlas/content draft"))
    assert_fire(decision, "atlas")
    assert decision.content == "@atlas/content draft"


def test_inline_topic() -> None:
    decision = run(msg(GROUP, "#billing refund please"))
    assert_fire(decision, "atlas")
    assert (decision.topic, decision.inline, decision.content) == (
        "billing",
        "#billing",
        "refund please",
    )


def test_inline_topic_does_not_touch_sticky_topic() -> None:
    decision = run(msg(GROUP, "#billing refund"), chat=ChatState(sticky_topic="support"))
    assert decision.command is None


def test_inline_child_in_a_reply_chain() -> None:
    folders = SPEC_FOLDERS | {"atlas/content/long"}
    message = msg(GROUP, "@long expand it", reply=assistant_reply("atlas/content"))
    decision = run(message, folders=folders)
    assert_fire(decision, "atlas/content/long", Layer.REPLY_CHAIN)
    assert decision.content == "expand it"


# ---------------------------------------------------------------------------------------------
# §3: every message is routed on its own; §1 / §5: verbs, mentions and the trigger.


def test_mention_followed_by_chatter_both_handled_on_their_own() -> None:
    mention = run(msg(GUILD, "@Postroom what's up"), MENTION_PAIR)
    chatter = run(msg(GUILD, "lol"), MENTION_PAIR)
    assert (mention.action, mention.folder, mention.route_id) == (Action.FIRE, "main", 6)
    assert (chatter.action, chatter.folder, chatter.route_id) == (Action.OBSERVE, "main", 7)


MENTION_TABLE = table([(1, 0, "verb=mention", "atlas"), (2, 1, "", "main")])


@pytest.mark.parametrize(
    "content",
    [
        "@Postroom hi",
        "@postroom",
        "@POSTROOM, hi",
        "@Postroom: summarize",
        "@Postroom! now",
        "@Postroom?",
        "@ghost hi",
        "@Ghost.",
    ],
)
def test_trigger_makes_a_mention(content: str) -> None:
    decision = run(msg(GROUP, content), MENTION_TABLE)
    assert decision.verb == "mention"
    assert decision.route_id == 1
    assert decision.content == content  # the trigger stays in the content


@pytest.mark.parametrize(
    "content", ["Hey @Postroom", "@Postroomx hi", "@ghostly", "hi", "Postroom hi", "@ atlas"]
)
def test_not_a_trigger(content: str) -> None:
    decision = run(msg(GROUP, content), MENTION_TABLE)
    assert decision.verb == "message"
    assert decision.route_id == 2


def test_trigger_with_configured_name_and_aliases() -> None:
    trigger = Trigger(assistant_name="Atlas", aliases=("bob",))
    assert run(msg(GROUP, "@atlas hi"), MENTION_TABLE, trigger=trigger).verb == "mention"
    assert run(msg(GROUP, "@Bob hi"), MENTION_TABLE, trigger=trigger).verb == "mention"
    assert run(msg(GROUP, "@Postroom hi"), MENTION_TABLE, trigger=trigger).verb == "message"


def test_platform_mentioned_flag_makes_a_mention() -> None:
    decision = run(msg(GROUP, "hi there", mentioned=True), MENTION_TABLE)
    assert decision.verb == "mention"
    assert decision.route_id == 1


def test_reply_to_a_gateway_message_makes_a_mention() -> None:
    reply = assistant_reply("atlas")
    decision = run(msg(GROUP, "ok", reply=reply), MENTION_TABLE)
    assert decision.verb == "mention"
    assert decision.route_id == 1


def test_reply_to_a_host_notice_makes_a_mention() -> None:
    reply = ReplyTarget(MessageType.HOST, True, None, "")
    decision = run(msg(GROUP, "ok", reply=reply), MENTION_TABLE)
    assert decision.verb == "mention"


def test_reply_verb_becomes_a_mention_with_the_trigger() -> None:
    decision = run(msg(GROUP, "@Postroom yes", verb="reply"), MENTION_TABLE)
    assert decision.verb == "mention"


@pytest.mark.parametrize(
    "verb", ["post", "like", "dislike", "repost", "follow", "join", "untrusted"]
)
def test_other_verbs_never_become_mention(verb: str) -> None:
    message = msg(GROUP, "@Postroom hi", verb=verb, mentioned=True, reply=assistant_reply("main"))
    decision = run(message, MENTION_TABLE)
    assert decision.verb == verb
    assert decision.route_id == 2


def test_a_dm_is_not_by_itself_a_mention() -> None:
    decision = run(msg("discord:dm/9", "hi"), MENTION_TABLE)
    assert decision.verb == "message"


def test_an_empty_verb_is_read_as_message() -> None:
    decision = run(msg(GROUP, "hi", verb=""))
    assert decision.verb == "message"


def test_resolve_is_pure_for_a_given_state() -> None:
    state = ChatState(sticky_group="atlas/social", engagements={"": _eng("atlas/content")})
    message = msg(GROUP, "hello")
    first = run(message, chat=state)
    assert run(message, chat=state) == first
    assert state == ChatState(sticky_group="atlas/social", engagements={"": _eng("atlas/content")})
    assert ChatState() == EMPTY_CHAT
