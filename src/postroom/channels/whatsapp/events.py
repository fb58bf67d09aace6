"""Reading the Cloud API's webhooks: the signature, and the messages a payload carries.

A payload is ``{"object": "whatsapp_business_account", "entry": [{"changes": [{"field":
"messages", "value": {...}}]}]}``; a ``value`` holds ``metadata`` (the business number it is
for), ``contacts`` (profile names by ``wa_id``), ``messages`` and ``statuses`` (delivery receipts
of what we sent, which postroom does not need). One webhook may carry several messages, and
several numbers of one business may share the app's webhook: only ours are read.

Everything here is pure: the channel downloads media and hands the result to ingest.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from postroom.core.jid import encode_id_part
from postroom.core.messages import Verb
from postroom.core.signing import hmac_hex, hmac_hex_matches

__all__ = ["MediaRef", "WhatsAppMessage", "parse_payload", "signature_valid"]

#: Message types whose media postroom fetches (the rest are kept as a reference).
_MEDIA_KINDS = {
    "image": "image",
    "audio": "voice",
    "video": "video",
    "document": "file",
    "sticker": "sticker",
}
_DISLIKES = frozenset({"👎", "👎🏻", "👎🏼", "👎🏽", "👎🏾", "👎🏿"})


def signature_valid(app_secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``X-Hub-Signature-256`` is ``sha256=`` + HMAC-SHA256(app secret, raw body)."""
    if not header or not header.startswith("sha256="):
        return False
    presented = header.removeprefix("sha256=").strip().lower()
    return hmac_hex_matches(hmac_hex(app_secret, body), presented)


@dataclass(frozen=True, slots=True)
class MediaRef:
    """A file of a message, by its Graph media id (fetched with the access token)."""

    kind: str  # image, voice, video, file or sticker
    media_id: str
    mime: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class WhatsAppMessage:
    """One inbound message, normalized but for its media."""

    id: str
    wa_id: str
    name: str
    group_id: str
    type: str
    text: str
    timestamp: datetime | None
    reply_to: str | None
    verb: Verb
    mentioned: bool
    is_from_me: bool
    media: MediaRef | None
    context_from: str = ""

    @property
    def chat_jid(self) -> str:
        if self.group_id:
            return f"whatsapp:group/{encode_id_part(self.group_id)}"
        return f"whatsapp:user/{encode_id_part(self.wa_id)}"

    @property
    def sender(self) -> str:
        return f"whatsapp:user/{encode_id_part(self.wa_id)}"


def parse_payload(
    payload: Mapping[str, Any], *, phone_number_id: str, assistant_name: str
) -> list[WhatsAppMessage]:
    """The messages of a webhook payload addressed to *phone_number_id*, in order."""
    if payload.get("object") != "whatsapp_business_account":
        return []
    found: list[WhatsAppMessage] = []
    for value in _values(payload):
        metadata = _map(value.get("metadata"))
        if str(metadata.get("phone_number_id") or phone_number_id) != phone_number_id:
            continue  # another number of the same business
        own_number = _digits(metadata.get("display_phone_number"))
        names = {
            _id(contact.get("wa_id")): str(_map(contact.get("profile")).get("name") or "")
            for contact in _maps(value.get("contacts"))
        }
        for raw in _maps(value.get("messages")):
            message = _message(raw, names, own_number, assistant_name, echo=False)
            if message is not None:
                found.append(message)
        # Messages the business sent from the WhatsApp Business app (coexistence echoes).
        for raw in _maps(value.get("message_echoes")):
            message = _message(raw, names, own_number, assistant_name, echo=True)
            if message is not None:
                found.append(message)
    return found


def _values(payload: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for entry in _maps(payload.get("entry")):
        for change in _maps(entry.get("changes")):
            if change.get("field") in ("messages", "smb_message_echoes"):
                yield _map(change.get("value"))


def _message(
    raw: Mapping[str, Any],
    names: Mapping[str, str],
    own_number: str,
    assistant_name: str,
    *,
    echo: bool,
) -> WhatsAppMessage | None:
    message_id = str(raw.get("id") or "")
    sender = _id(raw.get("from"))
    if not message_id or not sender:
        return None
    kind = str(raw.get("type") or "")
    body = _map(raw.get(kind))
    verb = Verb.MESSAGE
    reply_to = _map(raw.get("context")).get("id")
    media: MediaRef | None = None
    if kind == "text":
        text = str(body.get("body") or "")
    elif kind in _MEDIA_KINDS:
        text = str(body.get("caption") or "")
        media = MediaRef(
            kind=_MEDIA_KINDS[kind],
            media_id=str(body.get("id") or ""),
            mime=str(body.get("mime_type") or "").split(";")[0].strip(),
            name=str(body.get("filename") or ""),
        )
    elif kind == "reaction":
        emoji = str(body.get("emoji") or "")
        if not emoji:
            return None  # a reaction taken back
        text = emoji
        verb = Verb.DISLIKE if emoji in _DISLIKES else Verb.LIKE
        reply_to = body.get("message_id")
    else:
        text = _described(kind, raw, body)
        if not text:
            return None  # system notices, unsupported types: nothing a person said
    mentioned = False
    if own_number and not echo:
        # WhatsApp writes a mention of a number as "@<its digits>" in the text.
        tag = re.compile(rf"@\+?{re.escape(own_number)}\b")
        text, count = tag.subn(f"@{assistant_name}", text)
        mentioned = count > 0
    wa_id = _id(raw.get("to")) if echo else sender
    return WhatsAppMessage(
        id=message_id,
        wa_id=wa_id or sender,
        name=names.get(sender, ""),
        group_id=str(raw.get("group_id") or ""),
        type=kind,
        text=text,
        timestamp=_timestamp(raw.get("timestamp")),
        reply_to=str(reply_to) if reply_to else None,
        verb=verb,
        mentioned=mentioned,
        is_from_me=echo or (bool(own_number) and sender == own_number),
        media=media,
        context_from=_id(_map(raw.get("context")).get("from")),
    )


def _described(kind: str, raw: Mapping[str, Any], body: Mapping[str, Any]) -> str:
    """Words for the message types that are not text or media."""
    if kind == "location":
        place = ", ".join(str(body[k]) for k in ("name", "address") if body.get(k))
        where = f"{body.get('latitude')}, {body.get('longitude')}"
        return f"[Location: {place} ({where})]" if place else f"[Location: {where}]"
    if kind == "contacts":
        people = [
            str(_map(c.get("name")).get("formatted_name") or "") for c in _maps(raw.get("contacts"))
        ]
        return f"[Contact: {', '.join(p for p in people if p)}]"
    if kind == "interactive":
        choice = _map(body.get("button_reply")) or _map(body.get("list_reply"))
        return str(choice.get("title") or "")
    if kind == "button":
        return str(body.get("text") or "")
    return ""


def _timestamp(value: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(int(value), UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _id(value: Any) -> str:
    """A wa_id as the ids of WhatsApp write it (a phone number may come with a ``+``)."""
    return str(value or "").strip().removeprefix("+")


def _digits(value: Any) -> str:
    """A display phone number (``+1 555-078-3881``) as the digits a wa_id has."""
    return re.sub(r"\D", "", str(value or ""))


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _maps(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []
