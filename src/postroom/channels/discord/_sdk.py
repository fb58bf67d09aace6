"""discord.py, imported once and quietly.

discord.py imports the standard library's ``audioop`` for voice playback, which postroom never
uses; Python 3.11 deprecates that module and warns when it is first imported. The warning is
about discord.py's dependency, not about anything an operator can act on, so the first import
happens here with exactly that warning silenced. Every module of this package takes ``discord``
from here, so the SDK is never imported another way first.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord
    import discord.gateway
    import discord.http

__all__ = ["discord"]
