"""A fake Mastodon instance speaking the REST API's wire format as Mastodon.py uses it.

``GET /api/v1/accounts/verify_credentials``, ``GET /api/v1/accounts/{id}``,
``GET /api/v1/notifications`` (``types[]``, ``min_id``/``since_id``/``max_id``, ``limit``;
newest first), ``GET /api/v1/statuses/{id}``,
``POST /api/v1/statuses`` (form body, ``Idempotency-Key``), and public media files. Every
call needs ``Authorization: Bearer <token>``; failures can be queued with the headers a real
instance sends (``X-RateLimit-Reset`` on a 429).
"""

from __future__ import annotations

import html
import itertools
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN = "mastodon-test-token"
BOT_ID = "100"
BOT_USERNAME = "postroom"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class FakeMastodon:
    def __init__(self) -> None:
        self.base_url = ""
        self.notifications: list[dict[str, Any]] = []
        self.statuses: dict[str, dict[str, Any]] = {}
        #: The instance's accounts by id (one id per acct, whoever asks for it again).
        self.accounts: dict[str, dict[str, Any]] = {}
        #: POST /api/v1/statuses bodies, with the Idempotency-Key header as ``_key``.
        self.posted: list[dict[str, Any]] = []
        #: Every request: (method, path, query string).
        self.requests: list[tuple[str, str, str]] = []
        self.calls: dict[str, int] = defaultdict(int)
        #: Canned answers for the next POST /api/v1/statuses calls: (status, body, headers).
        self.post_failures: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        #: The same for the next GET /api/v1/notifications, GET /api/v1/statuses/{id} and
        #: GET /api/v1/accounts/{id}.
        self.poll_failures: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.lookup_failures: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.account_failures: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.media: dict[str, tuple[bytes, str]] = {}
        self._ids = itertools.count(1000)
        self._by_key: dict[str, dict[str, Any]] = {}

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/v1/accounts/verify_credentials", self._verify, methods=["GET"]),
                Route("/api/v1/accounts/{id}", self._account, methods=["GET"]),
                Route("/api/v1/notifications", self._notifications, methods=["GET"]),
                Route("/api/v1/statuses/{id}", self._status, methods=["GET"]),
                Route("/api/v1/statuses", self._post_status, methods=["POST"]),
                Route("/media/{name}", self._media, methods=["GET"]),
            ]
        )

    # -- building the instance's state -----------------------------------------------------------
    def account(
        self, username: str, *, domain: str | None = None, id: str | None = None, name: str = ""
    ) -> dict[str, Any]:
        """The account *username* (at *domain*, else local), registered with the instance: the
        same acct keeps its id unless *id* says otherwise."""
        acct = f"{username}@{domain}" if domain else username
        host = f"https://{domain}" if domain else self.base_url
        known = next((a["id"] for a in self.accounts.values() if a["acct"] == acct), None)
        account = {
            "id": id or known or str(next(self._ids)),
            "username": username,
            "acct": acct,
            "display_name": name,
            "locked": False,
            "bot": False,
            "created_at": "2024-01-01T00:00:00.000Z",
            "note": "",
            "url": f"{host}/@{username}",
            "avatar": f"{self.base_url}/media/avatar.png",
            "followers_count": 1,
            "following_count": 1,
            "statuses_count": 1,
        }
        if known is not None and known != account["id"]:
            del self.accounts[known]
        self.accounts[account["id"]] = account
        return account

    @property
    def bot(self) -> dict[str, Any]:
        return self.account(BOT_USERNAME, id=BOT_ID, name="Postroom")

    def mention_html(self, text: str) -> str:
        """A status's content as Mastodon renders ``@postroom <text>``."""
        mention = (
            f'<span class="h-card" translate="no"><a href="{self.base_url}/@{BOT_USERNAME}" '
            f'class="u-url mention">@<span>{BOT_USERNAME}</span></a></span>'
        )
        return f"<p>{mention} {html.escape(text)}</p>"

    def add_status(
        self,
        account: dict[str, Any],
        content: str,
        *,
        visibility: str = "public",
        in_reply_to_id: str | None = None,
        created_at: datetime | None = None,
        media: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        status_id = str(next(self._ids))
        status = {
            "id": status_id,
            "uri": f"{self.base_url}/users/{account['username']}/statuses/{status_id}",
            "url": f"{self.base_url}/@{account['acct']}/{status_id}",
            "created_at": iso(created_at or datetime.now(UTC)),
            "account": account,
            "content": content,
            "visibility": visibility,
            "sensitive": False,
            "spoiler_text": "",
            "media_attachments": media or [],
            "mentions": [],
            "tags": [],
            "emojis": [],
            "reblogs_count": 0,
            "favourites_count": 0,
            "replies_count": 0,
            "in_reply_to_id": in_reply_to_id,
            "in_reply_to_account_id": None,
            "reblog": None,
            "language": "en",
        }
        self.statuses[status_id] = status
        return status

    def notify(
        self,
        status: dict[str, Any],
        *,
        type: str = "mention",
        created_at: datetime | None = None,
    ) -> dict[str, Any]:
        notification = {
            "id": str(next(self._ids)),
            "type": type,
            "created_at": iso(created_at or datetime.now(UTC)),
            "account": status["account"],
            "status": status,
        }
        self.notifications.append(notification)
        return notification

    def mention(self, account: dict[str, Any], text: str, **kw: Any) -> dict[str, Any]:
        """A status from *account* mentioning the bot, and its notification; the status."""
        created_at = kw.get("created_at")
        status = self.add_status(account, self.mention_html(text), **kw)
        self.notify(status, created_at=created_at)
        return status

    def media_url(self, name: str) -> str:
        return f"{self.base_url}/media/{name}"

    # -- the API ----------------------------------------------------------------------------------
    def _authorized(self, request: Request) -> bool:
        self.requests.append((request.method, request.url.path, request.url.query))
        self.calls[request.url.path] += 1
        return request.headers.get("authorization") == f"Bearer {TOKEN}"

    @staticmethod
    def _unauthorized() -> Response:
        return JSONResponse({"error": "The access token is invalid"}, status_code=401)

    async def _verify(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        return JSONResponse(self.bot | {"source": {"privacy": "public", "note": ""}})

    async def _account(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        if self.account_failures:
            status_code, body, headers = self.account_failures.pop(0)
            return JSONResponse(body, status_code=status_code, headers=headers)
        account = self.accounts.get(request.path_params["id"])
        if account is None:
            return JSONResponse({"error": "Record not found"}, status_code=404)
        return JSONResponse(account)

    async def _notifications(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        if self.poll_failures:
            status_code, body, headers = self.poll_failures.pop(0)
            return JSONResponse(body, status_code=status_code, headers=headers)
        query = request.query_params
        types = query.getlist("types[]")
        limit = int(query.get("limit") or 40)
        items = [n for n in self.notifications if not types or n["type"] in types]
        items.sort(key=lambda n: int(n["id"]))
        if query.get("max_id"):
            items = [n for n in items if int(n["id"]) < int(query["max_id"])]
        if query.get("min_id"):
            # The page right after min_id (oldest first), listed newest first.
            items = [n for n in items if int(n["id"]) > int(query["min_id"])][:limit]
        else:
            if query.get("since_id"):
                items = [n for n in items if int(n["id"]) > int(query["since_id"])]
            items = items[-limit:]
        return JSONResponse(list(reversed(items)))

    async def _status(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        if self.lookup_failures:
            status_code, body, headers = self.lookup_failures.pop(0)
            return JSONResponse(body, status_code=status_code, headers=headers)
        status = self.statuses.get(request.path_params["id"])
        if status is None:
            return JSONResponse({"error": "Record not found"}, status_code=404)
        return JSONResponse(status)

    async def _post_status(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        # Mastodon.py posts an urlencoded form.
        form: dict[str, Any] = dict(
            parse_qsl((await request.body()).decode(), keep_blank_values=True)
        )
        form["_key"] = request.headers.get("idempotency-key")
        self.posted.append(form)
        if self.post_failures:
            status_code, body, headers = self.post_failures.pop(0)
            return JSONResponse(body, status_code=status_code, headers=headers)
        key = form["_key"]
        if key and key in self._by_key:
            return JSONResponse(self._by_key[key])
        reply_to = form.get("in_reply_to_id")
        if reply_to and reply_to not in self.statuses:
            return JSONResponse({"error": "Record not found"}, status_code=404)
        status = self.add_status(
            self.bot,
            f"<p>{html.escape(str(form.get('status') or ''))}</p>",
            visibility=str(form.get("visibility") or "public"),
            in_reply_to_id=reply_to,
        )
        if key:
            self._by_key[key] = status
        return JSONResponse(status)

    async def _media(self, request: Request) -> Response:
        self.requests.append((request.method, request.url.path, request.url.query))
        item = self.media.get(request.path_params["name"])
        if item is None:
            return Response("not found", status_code=404)
        data, mime = item
        return Response(data, media_type=mime)


def rate_limited(seconds: float) -> tuple[int, dict[str, Any], dict[str, str]]:
    """What an instance answers when the bot posted too much: reset in *seconds*."""
    reset = datetime.now(UTC) + timedelta(seconds=seconds)
    return (
        429,
        {"error": "Too many requests"},
        {
            "X-RateLimit-Limit": "300",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": reset.isoformat().replace("+00:00", "Z"),
        },
    )
