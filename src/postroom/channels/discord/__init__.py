"""Discord: a bot on the gateway in, REST messages out (``[channels.discord]``)."""

from postroom.channels.discord.channel import DiscordChannel, build
from postroom.channels.discord.config import DiscordConfig, parse_config

__all__ = ["DiscordChannel", "DiscordConfig", "build", "parse_config"]
