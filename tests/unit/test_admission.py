"""Admission as a pure function (ROUTING §8): every policy × role × DM/group, the most specific
principal, the exempt platforms, pairing codes."""

from __future__ import annotations

import itertools
import random

import pytest

from postroom.core.access import (
    CODE_ALPHABET,
    AccessPolicy,
    DmPolicy,
    GroupPolicy,
    PairingState,
    Principal,
    PrincipalTable,
    Role,
    Verdict,
    admit,
    escape_glob,
    new_pairing_code,
    normalize_code,
    pairing_prompt,
    pairing_step,
    parse_principal_pattern,
    parse_role,
)
from postroom.core.errors import InvalidInput
from postroom.core.glob import compile_pattern

SENDER = "telegram:user/9"
DM = "telegram:user/9"
GROUP = "telegram:group/5"


def table_for(role: Role | None) -> PrincipalTable:
    return PrincipalTable([] if role is None else [Principal(1, SENDER, role)])


def expected(role: Role | None, is_dm: bool, dm: DmPolicy, group: GroupPolicy) -> Verdict:
    """The rules of ROUTING §8, written out independently of the implementation."""
    if role is Role.BLOCKED:
        return Verdict.REFUSE
    if role in (Role.OWNER, Role.MEMBER):
        return Verdict.ADMIT
    if is_dm:
        return {
            DmPolicy.PAIRING: Verdict.PAIR,
            DmPolicy.ALLOWLIST: Verdict.REFUSE,
            DmPolicy.OPEN: Verdict.ADMIT,
        }[dm]
    return Verdict.ADMIT if group is GroupPolicy.ROUTES else Verdict.REFUSE


@pytest.mark.parametrize(
    ("role", "is_dm", "dm", "group"),
    list(itertools.product([None, *Role], [True, False], list(DmPolicy), list(GroupPolicy))),
)
def test_every_policy_role_and_place(
    role: Role | None, is_dm: bool, dm: DmPolicy, group: GroupPolicy
) -> None:
    chat = DM if is_dm else GROUP
    policy = AccessPolicy(dm_policy=dm, group_policy=group)
    got = admit(chat, SENDER, is_dm, table_for(role), policy)
    assert got.verdict is expected(role, is_dm, dm, group)
    assert got.role is role
    if got.verdict is Verdict.ADMIT:
        assert got.drop is None
    else:
        assert got.drop in ("not_admitted", "pairing_pending", "blocked")
        assert got.why  # a refusal always says why
    if role is Role.BLOCKED:
        assert got.drop == "blocked"
    if got.verdict is Verdict.PAIR:
        assert got.drop == "pairing_pending"


def test_reasons_name_the_verdict() -> None:
    stranger = admit(DM, SENDER, True, PrincipalTable(), AccessPolicy())
    assert stranger.why == "sender telegram:user/9 is not approved (dm_policy pairing)"
    member = admit(
        GROUP, SENDER, False, PrincipalTable([Principal(4, SENDER, Role.MEMBER)]), AccessPolicy()
    )
    assert member.why == "sender matched principal 4 (member)"
    owner = admit(
        DM, SENDER, True, PrincipalTable([Principal(None, SENDER, Role.OWNER)]), AccessPolicy()
    )
    assert owner.why == "sender matched [owners] senders (owner)"
    # A group admitted by its routes adds nothing to the reason of the route that decides.
    assert admit(GROUP, SENDER, False, PrincipalTable(), AccessPolicy()).why is None


@pytest.mark.parametrize("platform", ["web", "tui", "hook"])
@pytest.mark.parametrize("is_dm", [True, False])
def test_web_tui_and_hook_are_not_subject_to_admission(platform: str, is_dm: bool) -> None:
    blocked_everyone = PrincipalTable([Principal(1, "*", Role.BLOCKED)])
    strict = AccessPolicy(dm_policy=DmPolicy.ALLOWLIST, group_policy=GroupPolicy.ALLOWLIST)
    got = admit(f"{platform}:x/1", f"{platform}:x/1", is_dm, blocked_everyone, strict)
    assert got.verdict is Verdict.ADMIT


def test_the_most_specific_principal_wins() -> None:
    table = PrincipalTable(
        [
            Principal(1, "telegram:*", Role.BLOCKED),
            Principal(2, "telegram:user/9", Role.MEMBER),
            Principal(3, "telegram:user/*", Role.OWNER),
            Principal(4, "telegram:user", Role.BLOCKED),
        ]
    )
    # The exact literal beats every glob and the shorter literal.
    assert (found := table.lookup("telegram:user/9")) is not None and found.id == 2
    # A literal beats a glob even when the glob is longer ("telegram:user" holds by the
    # subtree rule for every sender under it).
    assert (found := table.lookup("telegram:user/10")) is not None and found.id == 4
    # Among globs, the longer pattern wins.
    shorter = PrincipalTable(
        [Principal(1, "telegram:*", Role.BLOCKED), Principal(3, "telegram:user/*", Role.OWNER)]
    )
    assert (found := shorter.lookup("telegram:user/10")) is not None and found.id == 3
    assert (found := shorter.lookup("telegram:group/1")) is not None and found.id == 1
    assert shorter.lookup("discord:user/1") is None


def test_a_stored_principal_beats_the_same_pattern_from_owners() -> None:
    table = PrincipalTable(
        [Principal(7, SENDER, Role.BLOCKED), Principal(None, SENDER, Role.OWNER)]
    )
    assert (found := table.lookup(SENDER)) is not None and found.id == 7


def test_approval_patterns_match_only_that_sender() -> None:
    odd = "matrix:user/@bob*[x]?:example.org"
    pattern = escape_glob(odd)
    table = PrincipalTable([Principal(1, pattern, Role.MEMBER)])
    assert table.lookup(odd) is not None
    assert table.lookup("matrix:user/@bobby[x]z:example.org") is None
    assert table.lookup("matrix:user/@bob") is None


def test_principal_patterns_are_checked() -> None:
    assert parse_principal_pattern("  telegram:user/9 ") == "telegram:user/9"
    assert parse_principal_pattern("telegram:*") == "telegram:*"
    for bad in ("", "   ", "a b", "telegram:[", "user9", "x" * 2000, "telegram:user/"):
        with pytest.raises(InvalidInput):
            parse_principal_pattern(bad)
    assert parse_role(" Member ") is Role.MEMBER
    with pytest.raises(InvalidInput, match="roles are owner, member and blocked"):
        parse_role("admin")


def test_codes_are_eight_unambiguous_characters_in_two_groups() -> None:
    rng = random.Random(7)
    codes = {new_pairing_code(rng.randrange) for _ in range(200)}
    assert len(codes) == 200
    for code in codes:
        head, dash, tail = code.partition("-")
        assert dash and len(head) == len(tail) == 4
        assert all(c in CODE_ALPHABET for c in head + tail)
    assert not set("01OIL") & set(CODE_ALPHABET)
    assert normalize_code("abcd2345") == "ABCD-2345"
    assert normalize_code(" abcd-2345 ") == "ABCD-2345"
    assert normalize_code("ABCD-234O") is None  # O is not in the alphabet
    assert normalize_code("ABC") is None
    assert pairing_prompt("ABCD-2345") == (
        "To talk to this assistant, ask its operator to approve code ABCD-2345."
    )


def test_one_code_per_chat_and_a_cap_per_platform() -> None:
    policy = AccessPolicy(max_pending=3)
    assert pairing_step(PairingState(False, 0), policy) == (True, "code sent")
    assert pairing_step(PairingState(False, 2), policy)[0] is True
    sent, note = pairing_step(PairingState(False, 3), policy)
    assert not sent and "dropped silently" in note
    sent, note = pairing_step(PairingState(True, 0), policy)
    assert not sent and note == "a code was already sent to this chat"


def test_the_indexed_lookup_agrees_with_trying_every_principal() -> None:
    """The index is an optimisation only: the answer is the most specific principal that
    holds, as a plain scan finds it (a literal before a glob, then the longer pattern)."""
    rng = random.Random(11)
    parts = ["telegram:user", "telegram:group", "slack:user", "T1", "T2", "9", "10", "ab"]
    globs = ["*", "telegram:*", "*:user", "T?", "1*", "[0-9]", "a*"]

    def rank(principal: Principal) -> tuple[bool, int]:
        return (compile_pattern(principal.pattern).literal is None, -len(principal.pattern))

    def value(depth: int) -> str:
        return "/".join(rng.choice(parts) for _ in range(depth))

    for _round in range(40):
        principals = []
        for n in range(rng.randrange(1, 25)):
            segments = [
                rng.choice(globs) if rng.random() < 0.3 else rng.choice(parts)
                for _ in range(rng.randrange(1, 4))
            ]
            principals.append(Principal(n + 1, "/".join(segments), rng.choice(list(Role))))
        table = PrincipalTable(principals)
        compiled = [(p, compile_pattern(p.pattern)) for p in principals]
        for _ in range(50):
            sender = value(rng.randrange(1, 5))
            holding = [p for p, pattern in compiled if pattern.holds(sender)]
            found = table.lookup(sender)
            if not holding:
                assert found is None
                continue
            assert found in holding, (sender, found)
            assert rank(found) == min(rank(p) for p in holding), (sender, found, holding)
