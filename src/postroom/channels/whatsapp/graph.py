"""The few Graph API calls the adapter makes, over httpx, and Graph's errors as one exception.

Calls go to ``{base_url}/{api_version}/…`` with the access token as a bearer token. Graph
answers an error as ``{"error": {"message", "type", "code", "error_subcode", "error_data"}}``
with a 4xx/5xx status; :class:`GraphError` keeps the status, the code and any ``Retry-After``
so the channel can tell a rate limit from a gone recipient.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx

from postroom.core.errors import PostroomError

__all__ = ["GraphClient", "GraphError", "MediaFile"]

#: Hosts that serve WhatsApp media (the download URL needs the access token).
MEDIA_HOST_SUFFIXES = (".fbsbx.com", ".facebook.com", ".whatsapp.net", ".fbcdn.net")


class GraphError(PostroomError):
    """Graph refused a call (or answered something that is not Graph's JSON)."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after


class MediaFile:
    """A downloaded file: its bytes when they fit the cap, else ``None`` (a reference only)."""

    __slots__ = ("data", "mime", "size")

    def __init__(self, *, data: bytes | None, mime: str, size: int) -> None:
        self.data = data
        self.mime = mime
        self.size = size


class GraphClient:
    """Graph for one business phone number."""

    def __init__(
        self,
        *,
        http: httpx.AsyncClient,
        api_url: str,
        phone_number_id: str,
        access_token: str,
        timeout_s: float,
    ) -> None:
        self._http = http
        self._api_url = api_url
        self._phone_number_id = phone_number_id
        self._auth = {"Authorization": f"Bearer {access_token}"}
        self._timeout_s = timeout_s
        self._api_host = urlsplit(api_url).hostname or ""

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """One JSON call under the versioned root; a :class:`GraphError` for any refusal."""
        response = await self._http.request(
            method,
            self._api_url + path,
            json=body,
            headers=self._auth,
            timeout=timeout_s or self._timeout_s,
        )
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400 or not isinstance(data, dict) or "error" in data:
            raise _error(response, data)
        return data

    async def send_text(self, *, to: str, text: str, group: bool, context_id: str | None) -> str:
        """Send a text message; return its ``wamid``."""
        body: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "recipient_type": "group" if group else "individual",
            "to": to,
            "type": "text",
            "text": {"body": text},
        }
        if context_id:
            body["context"] = {"message_id": context_id}
        data = await self.call("POST", f"{self._phone_number_id}/messages", body=body)
        messages = data.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[0], dict):
            return str(messages[0].get("id") or "")
        return ""

    async def typing(self, message_id: str, *, timeout_s: float) -> None:
        """Mark *message_id* read and show the typing indicator (it lasts up to 25 s)."""
        body = {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": message_id,
            "typing_indicator": {"type": "text"},
        }
        await self.call("POST", f"{self._phone_number_id}/messages", body=body, timeout_s=timeout_s)

    async def phone(self) -> dict[str, Any]:
        """The business number's profile (``display_phone_number``, ``verified_name``)."""
        return await self.call("GET", self._phone_number_id)

    async def media(self, media_id: str, *, cap_bytes: int, timeout_s: float) -> MediaFile:
        """Look up a media id and download it within *cap_bytes*.

        The download URL needs the access token, so it is only ever sent to WhatsApp's media
        hosts (or to the configured Graph host); a file over the cap is never downloaded.
        """
        info = await self.call("GET", media_id, timeout_s=timeout_s)
        url = str(info.get("url") or "")
        mime = str(info.get("mime_type") or "")
        size = _int(info.get("file_size"))
        if not url or size > cap_bytes or not self.trusted(url):
            return MediaFile(data=None, mime=mime, size=size)
        body = bytearray()
        async with self._http.stream(
            "GET", url, headers=self._auth, timeout=timeout_s, follow_redirects=False
        ) as response:
            if response.status_code != 200:
                raise GraphError(
                    f"The media download answered {response.status_code}.",
                    status=response.status_code,
                )
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > cap_bytes:
                    return MediaFile(data=None, mime=mime, size=size or len(body))
        return MediaFile(data=bytes(body), mime=mime, size=len(body))

    def trusted(self, url: str) -> bool:
        """Whether the access token may be sent to *url*."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        if host == self._api_host and parts.scheme in ("http", "https"):
            return True
        return parts.scheme == "https" and host.endswith(MEDIA_HOST_SUFFIXES)


def _error(response: httpx.Response, data: Any) -> GraphError:
    error = data.get("error") if isinstance(data, dict) else None
    retry_after = _seconds(response.headers.get("retry-after"))
    if not isinstance(error, dict):
        return GraphError(
            f"Graph answered {response.status_code} without an error body.",
            status=response.status_code,
            retry_after=retry_after,
        )
    code = error.get("code")
    details = error.get("error_data")
    detail = details.get("details") if isinstance(details, dict) else None
    message = str(error.get("message") or "unknown error").rstrip(".")
    text = f"{message} ({code}){': ' + str(detail) if detail else ''}"
    return GraphError(
        f"Graph answered {response.status_code}: {text}.",
        status=response.status_code,
        code=code if isinstance(code, int) else _int(code) or None,
        retry_after=retry_after,
    )


def _seconds(value: Any) -> float | None:
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
