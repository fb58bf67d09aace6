"""postroom: a self-hosted message router for LLM agents."""

__version__ = "0.1.0"
