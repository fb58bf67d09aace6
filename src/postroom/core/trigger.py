"""The trigger and verb detection (ROUTING §1, §5).

A ``message`` or ``reply`` becomes a ``mention`` when its text starts with ``@<assistant_name>``
or ``@<alias>`` (case-insensitive, followed by the end, whitespace or punctuation), when it is a
command addressed to this bot (``/cmd@<bot username>``), when the platform marks the bot as
mentioned, or when it replies to a message the gateway sent. A DM is not by itself a mention.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from postroom.core.messages import Verb

__all__ = ["DEFAULT_ALIASES", "DEFAULT_ASSISTANT_NAME", "Trigger", "effective_verb"]

DEFAULT_ASSISTANT_NAME = "Postroom"
DEFAULT_ALIASES: tuple[str, ...] = ("ghost",)


@dataclass(frozen=True, slots=True)
class Trigger:
    """The names this gateway answers to, compiled once."""

    assistant_name: str = DEFAULT_ASSISTANT_NAME
    aliases: tuple[str, ...] = DEFAULT_ALIASES
    #: Platform usernames of the bot (``postroom_bot``), for ``/cmd@postroom_bot``.
    bot_usernames: tuple[str, ...] = ()
    _names: frozenset[str] = field(init=False, repr=False, compare=False)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [n for n in (self.assistant_name, *self.aliases) if n]
        alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        # (?![\w-]): the name must end at the end of text, whitespace or punctuation, so
        # "@Postroomx" and "@postroom-bot" are other names, not the trigger.
        regex = re.compile(rf"\s*@(?:{alternatives})(?![\w-])[\s,:]*", re.IGNORECASE)
        object.__setattr__(self, "_regex", regex)
        every = (*names, *self.bot_usernames)
        object.__setattr__(self, "_names", frozenset(n.lower() for n in every if n))

    @classmethod
    def build(
        cls, assistant_name: str, aliases: Iterable[str], bot_usernames: Iterable[str] = ()
    ) -> Trigger:
        return cls(assistant_name, tuple(aliases), tuple(bot_usernames))

    def starts_with_trigger(self, text: str) -> bool:
        """Whether *text* opens with ``@<assistant_name>`` or an alias."""
        if not self._names or "@" not in text:
            return False
        return self._regex.match(text) is not None

    def after_trigger(self, text: str) -> str | None:
        """What follows the trigger that opens *text* (and the spaces, commas or colons after
        it); ``None`` when *text* does not open with the trigger."""
        if not self._names or "@" not in text:
            return None
        found = self._regex.match(text)
        return None if found is None else text[found.end() :]

    def addresses_us(self, name: str) -> bool:
        """Whether ``@name`` in ``/cmd@name`` is this bot."""
        return name.lower() in self._names


def effective_verb(
    verb: str,
    text: str,
    trigger: Trigger,
    mentioned: bool = False,
    replies_to_gateway: bool = False,
    addressed_command: bool = False,
) -> str:
    """The verb routing sees: ``message``/``reply`` turn into ``mention`` when called."""
    if not verb:
        verb = _MESSAGE
    if verb != _MESSAGE and verb != _REPLY:
        return str(verb)
    if (
        mentioned
        or replies_to_gateway
        or addressed_command
        or ("@" in text and trigger.starts_with_trigger(text))
    ):
        return _MENTION
    return str(verb)


_MESSAGE = Verb.MESSAGE.value
_REPLY = Verb.REPLY.value
_MENTION = Verb.MENTION.value
