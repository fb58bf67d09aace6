"""Wiring: reads the configuration, builds every component, runs ``postroom serve``."""

from postroom.app.gateway import Gateway, check_bind, serve

__all__ = ["Gateway", "check_bind", "serve"]
