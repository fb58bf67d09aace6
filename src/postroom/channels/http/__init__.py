"""Chats on platforms without a built-in adapter: an outbound webhook per platform, and the
event stream."""

from postroom.channels.http.webhook import (
    EventStreamSink,
    WebhookSession,
    WebhookSink,
    sign_body,
)

__all__ = ["EventStreamSink", "WebhookSession", "WebhookSink", "sign_body"]
