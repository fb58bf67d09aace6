"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest

from fakeclock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
