"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from fakeclock import FakeClock

# How fast inputs are generated depends on the machine's load, not on the code under test:
# a busy machine must not fail a property that holds.
settings.register_profile("postroom", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("postroom")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
