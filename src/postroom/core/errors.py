"""The one exception tree of postroom.

Every error postroom raises on purpose derives from :class:`PostroomError`, so a surface
(CLI, HTTP API) can turn any of them into one clear sentence without a traceback. Misuse of
the Python API itself (a wrong argument type) stays a plain ``TypeError``/``ValueError``.

    PostroomError
    ├── InvalidInput            bad input from a user or client; maps to exit 1 / HTTP 400
    │   ├── JidError            a chat or sender address that is not ``platform:room``
    │   ├── MatchSyntaxError    a route match expression that does not parse
    │   ├── TargetSyntaxError   a route target that does not parse
    │   ├── FolderNameError     a folder path outside ``[a-z0-9_-]+(/[a-z0-9_-]+)*``
    │   ├── ConfigError         a bad key or value in postroom.toml or the environment
    │   └── TooLarge            content or a body over its configured limit (HTTP 413)
    ├── Forbidden               a token acting outside its scope or its folder (HTTP 403)
    ├── NotFound                a folder, route, message ... that does not exist (HTTP 404)
    └── Conflict                a write that contradicts stored state (HTTP 409)

The message of each error is a complete sentence meant for the person who made the mistake.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "Conflict",
    "FolderNameError",
    "Forbidden",
    "InvalidInput",
    "JidError",
    "MatchSyntaxError",
    "NotFound",
    "PostroomError",
    "TargetSyntaxError",
    "TooLarge",
]


class PostroomError(Exception):
    """Root of every error postroom raises on purpose."""


class InvalidInput(PostroomError):
    """Input from a user or client that postroom refuses; nothing was changed."""


class JidError(InvalidInput):
    """An address that is not of the form ``platform:room``."""


class MatchSyntaxError(InvalidInput):
    """A route match expression that does not parse."""


class TargetSyntaxError(InvalidInput):
    """A route target that does not parse."""


class FolderNameError(InvalidInput):
    """A folder path that is not a valid path of ``[a-z0-9_-]+`` segments."""


class ConfigError(InvalidInput):
    """A bad key or value in the configuration."""


class TooLarge(InvalidInput):
    """Input over a configured size limit; refused, never truncated."""


class Forbidden(PostroomError):
    """A token asked for something outside its scope or outside its folder; nothing changed."""


class NotFound(PostroomError):
    """The thing asked for does not exist."""


class Conflict(PostroomError):
    """The write contradicts what is stored (an existing folder, a route still in use...)."""
