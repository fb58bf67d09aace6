"""``list_routes`` annotations (ROUTING §6): mode, fires_on, shadowed_by."""

from __future__ import annotations

import pytest

from postroom.core import Mode, RouteAnnotation, annotate_routes, fires_on, parse_match

from routing_helpers import SPEC_TABLE, table

Row = tuple[int, int, str, str]


def annotated(rows: list[Row]) -> dict[int, RouteAnnotation]:
    return {a.route.id: a for a in annotate_routes(table(rows))}


def shadows(rows: list[Row]) -> dict[int, int | None]:
    return {rid: a.shadowed_by for rid, a in annotated(rows).items()}


SPEC_EXPECTED = {
    1: (Mode.FIRE, "every message"),
    2: (Mode.FIRE, "every message"),
    3: (Mode.FIRE, "every message"),
    4: (Mode.FIRE, "verb post"),
    5: (Mode.FIRE, "every message"),
    6: (Mode.FIRE, "mentions only"),
    7: (Mode.OBSERVE, "never"),
    8: (Mode.TOPIC, "every message"),
    9: (Mode.FIRE, "every message"),
}


@pytest.mark.parametrize("route_id", sorted(SPEC_EXPECTED), ids=lambda i: f"row{i}")
def test_spec_table_annotations(route_id: int) -> None:
    found = {a.route.id: a for a in annotate_routes(SPEC_TABLE)}
    mode, fires = SPEC_EXPECTED[route_id]
    assert found[route_id].mode is mode
    assert found[route_id].fires_on == fires
    assert found[route_id].shadowed_by is None


def test_an_observe_row_fires_on_never_whatever_it_matches() -> None:
    rows: list[Row] = [(1, 0, "verb=mention", "main#observe"), (2, 1, "", "main#observe")]
    assert {rid: a.fires_on for rid, a in annotated(rows).items()} == {1: "never", 2: "never"}


def test_annotations_come_in_table_order() -> None:
    ids = [a.route.id for a in annotate_routes(SPEC_TABLE)]
    assert ids == [1, 2, 3, 4, 5, 6, 7, 8, 9]


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ("", "every message"),
        ("platform=discord", "every message"),
        ("verb=mention", "mentions only"),
        ("platform=x verb=mention", "mentions only"),
        ("verb=post", "verb post"),
        ("verb=like", "verb like"),
    ],
)
def test_fires_on(match: str, expected: str) -> None:
    assert fires_on(parse_match(match)) == expected


def test_earlier_catch_all_shadows_every_later_row() -> None:
    rows: list[Row] = [
        (1, 0, "", "main"),
        (2, 1, "platform=telegram", "atlas"),
        (3, 2, "verb=mention", "atlas"),
        (4, 3, "", "other"),
    ]
    assert shadows(rows) == {1: None, 2: 1, 3: 1, 4: 1}


def test_platform_row_shadows_later_chat_jid_row_of_that_platform() -> None:
    rows: list[Row] = [
        (1, 0, "platform=telegram", "atlas"),
        (2, 1, "chat_jid=telegram:user/5", "x"),
    ]
    assert shadows(rows) == {1: None, 2: 1}


def test_platform_row_does_not_shadow_another_platform() -> None:
    rows: list[Row] = [(1, 0, "platform=telegram", "atlas"), (2, 1, "chat_jid=discord:dm/5", "x")]
    assert shadows(rows)[2] is None


def test_chat_jid_glob_shadows_later_platform_and_room_row() -> None:
    rows: list[Row] = [
        (1, 0, "chat_jid=telegram:*", "atlas"),
        (2, 1, "platform=telegram room=group/5", "x"),
    ]
    assert shadows(rows)[2] == 1


def test_room_subtree_shadows_deeper_room() -> None:
    rows: list[Row] = [
        (1, 0, "platform=discord room=guild/*", "main"),
        (2, 1, "platform=discord room=guild/77/channel/3", "atlas"),
    ]
    assert shadows(rows)[2] == 1


def test_narrower_earlier_row_does_not_shadow_a_wider_row() -> None:
    rows: list[Row] = [
        (1, 0, "chat_jid=telegram:user/5", "x"),
        (2, 1, "platform=telegram", "atlas"),
    ]
    assert shadows(rows) == {1: None, 2: None}


def test_sender_template_row_never_shadows() -> None:
    rows: list[Row] = [
        (1, 0, "", "atlas/{sender}"),
        (2, 1, "platform=telegram", "atlas"),
    ]
    assert shadows(rows) == {1: None, 2: None}


def test_sender_template_row_is_skipped_but_a_later_catch_all_still_shadows() -> None:
    rows: list[Row] = [
        (1, 0, "", "atlas/{sender}"),
        (2, 1, "", "main"),
        (3, 2, "platform=telegram", "atlas"),
    ]
    assert shadows(rows) == {1: None, 2: None, 3: 2}


def test_mention_row_does_not_shadow_a_plain_row() -> None:
    rows: list[Row] = [
        (6, 20, "platform=discord room=guild/* verb=mention", "main"),
        (7, 30, "platform=discord room=guild/*", "main#observe"),
    ]
    assert shadows(rows) == {6: None, 7: None}


def test_plain_row_shadows_a_later_mention_row() -> None:
    rows: list[Row] = [
        (1, 0, "platform=discord room=guild/*", "main#observe"),
        (2, 1, "platform=discord room=guild/* verb=mention", "main"),
    ]
    assert shadows(rows)[2] == 1


def test_shadowing_follows_seq_and_id_not_insertion_order() -> None:
    rows: list[Row] = [(5, 0, "", "main"), (3, 0, "platform=telegram", "atlas")]
    # Row 3 comes first (same seq, lower id): it is not shadowed; row 5 is the catch-all.
    assert shadows(rows) == {3: None, 5: None}


def test_first_shadowing_row_is_reported() -> None:
    rows: list[Row] = [
        (1, 0, "platform=telegram", "a"),
        (2, 1, "", "b"),
        (3, 2, "chat_jid=telegram:group/5", "c"),
    ]
    assert shadows(rows)[3] == 1


def test_empty_pattern_rows() -> None:
    rows: list[Row] = [(1, 0, "sender=", "a"), (2, 1, "sender=", "b"), (3, 2, "sender=x", "c")]
    assert shadows(rows) == {1: None, 2: 1, 3: None}
