"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
from hypothesis import HealthCheck, settings

from fakeclock import FakeClock

# How fast inputs are generated depends on the machine's load, not on the code under test:
# a busy machine must not fail a property that holds.
settings.register_profile("postroom", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("postroom")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Each test starts from structlog's defaults: a level set by an earlier test's server
    (``configure_logging``) must not filter the events a later test captures."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
