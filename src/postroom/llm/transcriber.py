"""Voice notes to text through an OpenAI-compatible ``/audio/transcriptions`` endpoint
(``[transcriber] base_url, model, api_key``)."""

from __future__ import annotations

import httpx

from postroom.llm.base import ProviderError

__all__ = ["HttpTranscriber"]

_EXTENSIONS = {
    "audio/ogg": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/webm": "webm",
    "audio/aac": "aac",
}


class HttpTranscriber:
    def __init__(
        self, *, base_url: str, model: str, api_key: str | None, client: httpx.AsyncClient
    ) -> None:
        self._url = base_url.rstrip("/") + "/audio/transcriptions"
        self._model = model
        self._key = api_key
        self._client = client

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __call__(self, audio: bytes, mime: str) -> str:
        extension = _EXTENSIONS.get(mime.split(";")[0].strip(), "ogg")
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            response = await self._client.post(
                self._url,
                headers=headers,
                data={"model": self._model},
                files={"file": (f"voice.{extension}", audio, mime)},
                timeout=120.0,
            )
        except httpx.HTTPError as exc:
            raise ProviderError(f"transcriber unreachable: {exc}") from exc
        if response.status_code >= 400:
            raise ProviderError(f"transcriber answered {response.status_code}")
        payload = response.json()
        return str(payload.get("text", "")) if isinstance(payload, dict) else ""
