"""Wiring: reads the configuration, builds every component, runs ``postroom serve``.

The gateway (and with it the web stack) is imported on first use: the CLI's other commands
import small modules of this package, such as provider detection, and must start quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from postroom.app.gateway import Gateway, check_bind, serve

__all__ = ["Gateway", "check_bind", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from postroom.app import gateway

        return getattr(gateway, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
