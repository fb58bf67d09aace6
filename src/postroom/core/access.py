"""Admission (ROUTING §8): whether a sender may be answered at all, decided before routing.

A route says where a message goes; admission says whether its sender may talk to the agents.
Principals are sender globs with a role — ``owner``, ``member`` or ``blocked`` — and the most
specific one that holds for the sender wins (a literal pattern beats a glob, then the longer
pattern). A blocked sender is refused everywhere. A direct message from a sender without a
principal follows the DM policy (``pairing`` by default: the chat is offered a one-time code);
a group message follows the group policy (``routes`` by default: having a route admits it).
Messages from ``web`` (a visitor's own page), ``tui`` (the API token) and ``hook`` (signed) are
not subject to admission.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from postroom.core.errors import InvalidInput
from postroom.core.glob import GlobError, Pattern, compile_pattern

__all__ = [
    "CODE_ALPHABET",
    "EXEMPT_PLATFORMS",
    "MAX_NOTE_CHARS",
    "MAX_PATTERN_CHARS",
    "AccessPolicy",
    "Admission",
    "DmPolicy",
    "GroupPolicy",
    "PairingState",
    "Principal",
    "PrincipalTable",
    "Role",
    "Verdict",
    "admit",
    "escape_glob",
    "new_pairing_code",
    "normalize_code",
    "pairing_prompt",
    "pairing_step",
    "parse_principal_pattern",
    "parse_role",
]

#: Platforms whose messages are already authenticated or private to their visitor.
EXEMPT_PLATFORMS = frozenset({"web", "tui", "hook"})
#: No 0/O, 1/I/L: a code read aloud or copied by hand stays unambiguous.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
MAX_PATTERN_CHARS = 1024
MAX_NOTE_CHARS = 1024
_GLOB_SPECIAL = frozenset("*?[]\\")


class Role(StrEnum):
    OWNER = "owner"
    MEMBER = "member"
    BLOCKED = "blocked"


class DmPolicy(StrEnum):
    PAIRING = "pairing"
    ALLOWLIST = "allowlist"
    OPEN = "open"


class GroupPolicy(StrEnum):
    ROUTES = "routes"
    ALLOWLIST = "allowlist"


class Verdict(StrEnum):
    """``admit``: routing goes on; ``pair``: refused, and the chat may be offered a code;
    ``refuse``: refused silently."""

    ADMIT = "admit"
    PAIR = "pair"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class Principal:
    """A sender glob and its role. ``id`` is ``None`` for an ``[owners] senders`` entry."""

    id: int | None
    pattern: str
    role: Role
    note: str = ""
    created_at: datetime | None = None
    created_by: str = ""

    def describe(self) -> str:
        if self.id is None:
            return f"sender matched [owners] senders ({self.role.value})"
        return f"sender matched principal {self.id} ({self.role.value})"


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    dm_policy: DmPolicy = DmPolicy.PAIRING
    group_policy: GroupPolicy = GroupPolicy.ROUTES
    pairing_ttl_s: float = 3600.0
    max_pending: int = 3
    #: Chats told about each new pairing request.
    notify: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    #: The principal that decided, if any.
    principal: Principal | None = None
    #: The drop reason of a refused message (a :class:`~postroom.core.decision.DropReason` value).
    drop: str | None = None
    #: Why, in words; ``None`` when admission had nothing to say (a group admitted by routes).
    why: str | None = None

    @property
    def role(self) -> Role | None:
        return None if self.principal is None else self.principal.role


ADMITTED = Admission(Verdict.ADMIT)


def _specificity(principal: Principal, pattern: Pattern) -> tuple[int, int]:
    return (0 if pattern.literal is not None else 1, -len(principal.pattern))


class PrincipalTable:
    """The principals, most specific first, indexed so that a lookup costs a few dictionary
    reads however many there are: a literal pattern holds for the sender itself or a leading
    run of its ``/`` segments (the subtree rule), so it is found by those prefixes; a glob is
    filed under its leading literal segments and only tried for senders that start with them.
    """

    def __init__(self, principals: Iterable[Principal] = ()) -> None:
        compiled = [(p, compile_pattern(p.pattern)) for p in principals]
        compiled.sort(key=lambda pair: _specificity(*pair))
        self.principals: tuple[Principal, ...] = tuple(p for p, _ in compiled)
        #: Literal patterns by text; the first written wins a tie (stored before [owners]).
        self._literals: dict[str, Principal] = {}
        #: Globs by their leading literal segments (``""``: the first segment has a wildcard),
        #: each list longest pattern first.
        self._globs: dict[str, list[tuple[Principal, Pattern]]] = {}
        for principal, pattern in compiled:
            if pattern.literal is not None:
                self._literals.setdefault(pattern.literal, principal)
            else:
                key = pattern.leading_literal() or ""
                self._globs.setdefault(key, []).append((principal, pattern))

    def __len__(self) -> int:
        return len(self.principals)

    def lookup(self, sender: str) -> Principal | None:
        """The most specific principal whose pattern holds for *sender*, if any."""
        if not self.principals:
            return None
        prefixes = _prefixes(sender)
        literals = self._literals
        if literals:
            for prefix in prefixes:  # longest first: the most specific literal
                found = literals.get(prefix)
                if found is not None:
                    return found
        best: Principal | None = None
        globs = self._globs
        for key in (*prefixes, ""):
            for principal, pattern in globs.get(key, ()):
                if best is not None and len(principal.pattern) <= len(best.pattern):
                    break  # each list is longest first: nothing longer follows
                if pattern.holds(sender):
                    best = principal
                    break
        return best


def _prefixes(value: str) -> list[str]:
    """*value* and each leading run of its ``/`` segments, longest first."""
    out = [value]
    cut = value.rfind("/")
    while cut > 0:
        value = value[:cut]
        out.append(value)
        cut = value.rfind("/")
    return out


def admit(
    chat_jid: str, sender: str, is_dm: bool, table: PrincipalTable, policy: AccessPolicy
) -> Admission:
    """The admission verdict for a message from *sender* in *chat_jid*. Pure and total."""
    platform = chat_jid.partition(":")[0]
    if platform in EXEMPT_PLATFORMS:
        return ADMITTED
    principal = table.lookup(sender)
    if principal is not None:
        if principal.role is Role.BLOCKED:
            return Admission(
                Verdict.REFUSE, principal, "blocked", f"{principal.describe()}: dropped"
            )
        return Admission(Verdict.ADMIT, principal, None, principal.describe())
    if is_dm:
        policy_name = f"dm_policy {policy.dm_policy.value}"
        if policy.dm_policy is DmPolicy.OPEN:
            return Admission(Verdict.ADMIT, why=f"sender {sender} admitted ({policy_name})")
        why = f"sender {sender} is not approved ({policy_name})"
        if policy.dm_policy is DmPolicy.PAIRING:
            return Admission(Verdict.PAIR, drop="pairing_pending", why=why)
        return Admission(Verdict.REFUSE, drop="not_admitted", why=why)
    if policy.group_policy is GroupPolicy.ALLOWLIST:
        return Admission(
            Verdict.REFUSE,
            drop="not_admitted",
            why=f"sender {sender} is not approved (group_policy allowlist)",
        )
    return ADMITTED


def parse_role(text: str) -> Role:
    try:
        return Role(text.strip().lower())
    except ValueError:
        raise InvalidInput(
            f"Unknown role {text!r}; the roles are owner, member and blocked."
        ) from None


def parse_principal_pattern(text: str) -> str:
    """Check a principal's sender glob (ROUTING §2.1 grammar); return it trimmed."""
    if not isinstance(text, str):
        raise InvalidInput("The sender pattern must be text.")
    pattern = text.strip()
    if not pattern:
        raise InvalidInput("The sender pattern is empty; give a sender JID or glob.")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidInput(
            f"The sender pattern is {len(pattern)} characters long; the limit is "
            f"{MAX_PATTERN_CHARS}."
        )
    if any(c.isspace() for c in pattern):
        raise InvalidInput(f"The sender pattern {pattern!r} contains whitespace.")
    try:
        compile_pattern(pattern)
    except GlobError as exc:
        raise InvalidInput(f"Bad sender pattern: {exc}.") from exc
    head = pattern.split("/", 1)[0]
    if ":" not in head and head not in ("*", "**"):
        raise InvalidInput(
            f"The sender pattern {pattern!r} names no platform; write it like "
            "telegram:user/123 or telegram:*."
        )
    return pattern


def escape_glob(value: str) -> str:
    """A pattern that holds for exactly *value* (and what lies under it)."""
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in value)


def new_pairing_code(draw: Callable[[int], int]) -> str:
    """A fresh code, shown as two groups of four. *draw(n)* returns a random index below n
    (``secrets.randbelow``)."""
    chars = "".join(CODE_ALPHABET[draw(len(CODE_ALPHABET))] for _ in range(CODE_LENGTH))
    return f"{chars[:4]}-{chars[4:]}"


def normalize_code(text: str) -> str | None:
    """A code as a person may type it (any case, with or without the dash), or ``None``."""
    compact = "".join(text.split()).replace("-", "").upper()
    if len(compact) != CODE_LENGTH or any(c not in CODE_ALPHABET for c in compact):
        return None
    return f"{compact[:4]}-{compact[4:]}"


def pairing_prompt(code: str) -> str:
    """The host message a stranger's chat receives."""
    return f"To talk to this assistant, ask its operator to approve code {code}."


@dataclass(frozen=True, slots=True)
class PairingState:
    """What the store knows when a stranger writes: whether this chat already holds a code
    (pending, or denied and not yet expired) and how many codes are pending on the platform."""

    chat_has_code: bool
    pending_on_platform: int


def pairing_step(state: PairingState, policy: AccessPolicy) -> tuple[bool, str]:
    """Whether to send a new code, and the words that end the decision's reason."""
    if state.chat_has_code:
        return False, "a code was already sent to this chat"
    if state.pending_on_platform >= policy.max_pending:
        return False, f"{policy.max_pending} requests already pending: dropped silently"
    return True, "code sent"
