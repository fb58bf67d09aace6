"""E-mail: IMAP in, SMTP out; one chat per thread (``email:thread/<hash of its root>``)."""

from postroom.channels.email.channel import EmailChannel, EmailUnavailable, build
from postroom.channels.email.config import EmailConfig
from postroom.channels.email.parse import ThreadPoint, parse_email, thread_jid

__all__ = [
    "EmailChannel",
    "EmailConfig",
    "EmailUnavailable",
    "ThreadPoint",
    "build",
    "parse_email",
    "thread_jid",
]
