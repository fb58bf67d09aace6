"""How the nodes page says a heartbeat's age."""

from __future__ import annotations

import pytest

from postroom.dashboard.nodes_view import age_text


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (-2.0, "0 s ago"),
        (4.9, "4 s ago"),
        (119.0, "119 s ago"),
        (120.0, "2 min ago"),
        (7199.0, "119 min ago"),
        (7200.0, "2 h ago"),
    ],
)
def test_a_heartbeats_age_is_said_in_the_unit_that_fits(seconds: float, said: str) -> None:
    assert age_text(seconds) == said
