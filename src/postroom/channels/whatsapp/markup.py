"""WhatsApp's text markup, derived from Slack mrkdwn.

WhatsApp draws ``*bold*``, ``_italic_``, ``~strike~``, ```` `code` ```` and ```` ``` ````
blocks, ``> `` quotes and list lines — the very markers of Slack mrkdwn, which
:func:`postroom.core.formatting.format_for` already produces from the model's Markdown. Two
things differ: WhatsApp shows ``&amp;`` literally (it decodes no entities), and it has no
``<url|label>`` links (it links bare URLs itself). Slack's renderer escapes every ``& < >`` of
the text, so a raw ``<`` in its output can only open a link: undoing both is exact.
"""

from __future__ import annotations

import re

__all__ = ["whatsapp_from_mrkdwn"]

_ENTITIES = {"amp": "&", "lt": "<", "gt": ">"}
# A Slack link (no raw "<", ">" inside: its parts are escaped), or one escaped character.
_TOKEN = re.compile(r"<(?P<url>[^<>|]*)(?:\|(?P<label>[^<>]*))?>|&(?P<entity>amp|lt|gt);")


def _unescape(text: str) -> str:
    return re.sub(r"&(amp|lt|gt);", lambda m: _ENTITIES[m.group(1)], text)


def _replace(match: re.Match[str]) -> str:
    entity = match.group("entity")
    if entity is not None:
        return _ENTITIES[entity]
    url = _unescape(match.group("url"))
    label = _unescape(match.group("label") or "")
    return f"{label} ({url})" if label and label != url else url


def whatsapp_from_mrkdwn(mrkdwn: str) -> str:
    """Slack mrkdwn (as ``format_for("slack_mrkdwn", …)`` renders it) as WhatsApp text."""
    return _TOKEN.sub(_replace, mrkdwn)
