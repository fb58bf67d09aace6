"""A fake WhatsApp Cloud API (Graph) speaking the real wire format, and webhook builders.

Graph side: ``GET /{ver}/{phone_number_id}`` (the number's profile), ``POST
/{ver}/{phone_number_id}/messages`` (a text message → ``{"messages": [{"id": "wamid…"}]}``, or
``{"status": "read", "typing_indicator": …}`` → ``{"success": true}``), ``GET /{ver}/{media_id}``
(the media's download URL) and the download itself, all behind the bearer token. Errors are
Graph's ``{"error": {"message", "type", "code", …}}``.

Webhook side: payloads shaped as Meta sends them, signed ``X-Hub-Signature-256: sha256=<hex
HMAC-SHA256(app secret, body)>``.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
from collections import defaultdict
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

VERSION = "v21.0"
PHONE_ID = "106540352242922"
DISPLAY_NUMBER = "15550783881"
ACCESS_TOKEN = "EAAG-test-access-token"
APP_SECRET = "0123456789abcdef-app-secret"
VERIFY_TOKEN = "let-me-in"
WABA_ID = "102290129340398"
ALICE = "16505551234"
BOB = "447700900123"
GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"


class FakeWhatsApp:
    def __init__(self) -> None:
        self.base_url = ""
        #: (method, path, Authorization) of every Graph call.
        self.calls: list[tuple[str, str, str]] = []
        #: Bodies of POST /messages that sent a message.
        self.sent: list[dict[str, Any]] = []
        #: Bodies of POST /messages that marked a message read (with the typing indicator).
        self.reads: list[dict[str, Any]] = []
        #: Canned answers for the next POST /messages calls: (status, body, headers).
        self.failures: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        #: media id → (bytes, mime); ``media_info`` overrides what the lookup answers.
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_info: dict[str, dict[str, Any]] = {}
        self.downloads: list[str | None] = []
        self.phone_fails = False
        self._ids = itertools.count(1)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/files/{media_id}", self._download, methods=["GET"]),
                Route("/{version}/{phone}/messages", self._messages, methods=["POST"]),
                Route("/{version}/{node}", self._node, methods=["GET"]),
            ]
        )

    def _authorized(self, request: Request) -> bool:
        auth = request.headers.get("authorization", "")
        self.calls.append((request.method, request.url.path, auth))
        return auth == f"Bearer {ACCESS_TOKEN}" and request.path_params["version"] == VERSION

    async def _messages(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, 190, "Invalid OAuth access token.", "OAuthException")
        if request.path_params["phone"] != PHONE_ID:
            return _error(400, 100, "Unsupported post request.", "GraphMethodException")
        body = json.loads(await request.body())
        if self.failures:
            status, answer, headers = self.failures.pop(0)
            (self.reads if body.get("status") == "read" else self.sent).append(body)
            return JSONResponse(answer, status_code=status, headers=headers)
        if body.get("status") == "read":
            self.reads.append(body)
            return JSONResponse({"success": True})
        assert body["messaging_product"] == "whatsapp" and body["type"] == "text"
        self.sent.append(body)
        wamid = f"wamid.OUT{next(self._ids):04d}"
        return JSONResponse(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": body["to"], "wa_id": body["to"]}],
                "messages": [{"id": wamid}],
            }
        )

    async def _node(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, 190, "Invalid OAuth access token.", "OAuthException")
        node = request.path_params["node"]
        if node == PHONE_ID:
            if self.phone_fails:
                return _error(500, 2, "Service temporarily unavailable.", "OAuthException")
            return JSONResponse(
                {
                    "verified_name": "Acme Support",
                    "display_phone_number": "+1 555-078-3881",
                    "quality_rating": "GREEN",
                    "id": PHONE_ID,
                }
            )
        if node in self.media_info:
            return JSONResponse(self.media_info[node])
        if node in self.media:
            data, mime = self.media[node]
            return JSONResponse(
                {
                    "messaging_product": "whatsapp",
                    "url": self.file_url(node),
                    "mime_type": mime,
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "file_size": str(len(data)),
                    "id": node,
                }
            )
        return _error(400, 100, f"Unsupported get request. Object with ID '{node}' does not exist.")

    def file_url(self, media_id: str) -> str:
        return f"{self.base_url}/files/{media_id}"

    async def _download(self, request: Request) -> Response:
        auth = request.headers.get("authorization")
        self.downloads.append(auth)
        if auth != f"Bearer {ACCESS_TOKEN}":
            return Response("Unauthorized", status_code=401)
        data, mime = self.media[request.path_params["media_id"]]
        return Response(data, media_type=mime)


def _error(status: int, code: int, message: str, kind: str = "OAuthException") -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code, "fbtrace_id": "AbCdEf"}},
        status_code=status,
    )


def graph_error(code: int, message: str, *, details: str = "") -> dict[str, Any]:
    error: dict[str, Any] = {"message": message, "type": "OAuthException", "code": code}
    if details:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    return {"error": error}


# -- webhooks ----------------------------------------------------------------------------------


def webhook(
    messages: list[dict[str, Any]] | None = None,
    *,
    names: dict[str, str] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    echoes: list[dict[str, Any]] | None = None,
    phone_number_id: str = PHONE_ID,
) -> dict[str, Any]:
    """A ``messages`` webhook as Meta POSTs it."""
    names = names if names is not None else {ALICE: "Alice", BOB: "Bob"}
    value: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": DISPLAY_NUMBER, "phone_number_id": phone_number_id},
    }
    if messages is not None:
        senders = {str(m.get("from")).removeprefix("+") for m in messages}
        value["contacts"] = [
            {"profile": {"name": names[wa_id]}, "wa_id": wa_id}
            for wa_id in senders
            if wa_id in names
        ]
        value["messages"] = messages
    if statuses is not None:
        value["statuses"] = statuses
    field = "messages"
    if echoes is not None:
        value["message_echoes"] = echoes
        field = "smb_message_echoes"
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": WABA_ID, "changes": [{"value": value, "field": field}]}],
    }


def message(
    kind: str,
    content: dict[str, Any],
    *,
    id: str,
    sender: str = ALICE,
    group_id: str | None = None,
    context: dict[str, Any] | None = None,
    timestamp: int = 1767614400,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "from": sender,
        "id": id,
        "timestamp": str(timestamp),
        "type": kind,
        kind: content,
    }
    if group_id:
        body["group_id"] = group_id
    if context:
        body["context"] = context
    return body


def text(body: str, *, id: str, **kw: Any) -> dict[str, Any]:
    return message("text", {"body": body}, id=id, **kw)


def signature_headers(body: bytes, *, secret: str = APP_SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"content-type": "application/json", "x-hub-signature-256": f"sha256={digest}"}


def signed(payload: dict[str, Any], *, secret: str = APP_SECRET) -> tuple[bytes, dict[str, str]]:
    """The body and headers Meta sends for *payload*."""
    body = json.dumps(payload).encode()
    return body, signature_headers(body, secret=secret)


def section(base_url: str, **extra: Any) -> dict[str, Any]:
    """A ``[channels.whatsapp]`` section pointed at the fake."""
    return {
        "access_token": ACCESS_TOKEN,
        "phone_number_id": PHONE_ID,
        "app_secret": APP_SECRET,
        "verify_token": VERIFY_TOKEN,
        "base_url": base_url,
        **extra,
    }


def counts(calls: list[tuple[str, str, str]]) -> dict[str, int]:
    found: dict[str, int] = defaultdict(int)
    for method, path, _auth in calls:
        found[f"{method} {path}"] += 1
    return dict(found)
