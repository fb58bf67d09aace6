"""The operator dashboard (INTERFACES §6): server-rendered pages at ``/dashboard`` over the
same engine functions as the CLI, the API and MCP, signed in with a session cookie."""

from postroom.dashboard.app import Dashboard, DashboardContext

__all__ = ["Dashboard", "DashboardContext"]
