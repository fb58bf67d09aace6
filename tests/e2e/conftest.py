"""Fixtures for the end-to-end tests: a data directory, ``postroom serve`` subprocesses (always
killed at teardown) and the outbound-webhook sink. The machinery lives in :mod:`e2e_harness`."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from e2e_harness import ServerProcess, Sink, prepare_data_dir


@pytest.fixture(scope="session")
def initialized_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``postroom init`` per session (it costs a process start); tests get copies."""
    return prepare_data_dir(tmp_path_factory.mktemp("e2e-template") / "data")


@pytest.fixture
def data_dir(tmp_path: Path, initialized_data_dir: Path) -> Path:
    """A fresh data directory, as ``postroom init`` leaves it: folder main, route 9999 "" → main."""
    return Path(shutil.copytree(initialized_data_dir, tmp_path / "data"))


@pytest.fixture
def start_server(data_dir: Path) -> Iterator[Callable[..., ServerProcess]]:
    """``start_server(env)`` starts ``postroom serve`` on *data_dir*; all are killed at the end."""
    started: list[ServerProcess] = []

    def start(env: Mapping[str, str] | None = None, data: Path | None = None) -> ServerProcess:
        server = ServerProcess(data_dir=data or data_dir, env=dict(env or {}))
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.close()


@pytest.fixture
def sink() -> Iterator[Sink]:
    sink = Sink()
    sink.start()
    yield sink
    sink.stop()
