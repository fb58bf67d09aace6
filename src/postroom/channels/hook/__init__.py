"""Inbound webhooks: ``POST /hooks/<path>/<source>`` → chat ``hook:<path>/<source>``."""

from postroom.channels.hook.channel import HookChannel, HookConfig, build, render_payload

__all__ = ["HookChannel", "HookConfig", "build", "render_payload"]
