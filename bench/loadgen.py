"""A small keep-alive HTTP/1.1 load generator for the benchmarks.

General-purpose clients spend more CPU per request than the server under test once dozens of
requests are in flight (and the client shares the machine's two cores with the server), so
the benchmark would measure its own client. This one keeps a fixed pool of connections, writes
pre-encoded requests and reads only the status line, the headers and the body's length.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

__all__ = ["Poster"]


class Poster:
    """``POST`` JSON bodies over a pool of *size* persistent connections."""

    def __init__(self, host: str, port: int, *, token: str, size: int) -> None:
        self._host = host
        self._port = port
        self._token = token
        self._size = size
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self._all: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Poster:
        for _ in range(self._size):
            reader, writer = await asyncio.open_connection(self._host, self._port)
            self._all.append(writer)
            self._idle.put_nowait((reader, writer))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._all:
            writer.close()
        for writer in self._all:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def encode(self, path: str, body: dict[str, Any]) -> bytes:
        payload = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n"
            f"Authorization: Bearer {self._token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        return head.encode() + payload

    async def send(self, request: bytes) -> int:
        """Send one pre-encoded request; its HTTP status (the body is read and dropped).

        A connection the server closed while idle (its keep-alive timeout) is reopened once.
        """
        reader, writer = await self._idle.get()
        try:
            for attempt in (1, 2):
                writer.write(request)
                status_line = await reader.readline()
                if status_line or attempt == 2:
                    break
                writer.close()
                reader, writer = await asyncio.open_connection(self._host, self._port)
                self._all.append(writer)
            status = int(status_line.split()[1])
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
        finally:
            self._idle.put_nowait((reader, writer))
        return status
