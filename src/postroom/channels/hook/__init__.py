"""Inbound webhooks: ``POST /hooks/<path>/<source>`` → chat ``hook:<path>/<source>``."""

from postroom.channels.hook.channel import (
    DISABLED,
    HookChannel,
    HookConfig,
    build,
    disabled_routes,
    render_payload,
)

__all__ = [
    "DISABLED",
    "HookChannel",
    "HookConfig",
    "build",
    "disabled_routes",
    "render_payload",
]
