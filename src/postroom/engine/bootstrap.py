"""First-time set-up of a data directory's database: the folder ``main`` and the catch-all
route ``9999 "" → main`` (ROUTING §5). Idempotent: on a database whose catalog was ever written,
it changes nothing, so re-running ``postroom init`` never undoes an operator's edits.
"""

from __future__ import annotations

from dataclasses import dataclass

from postroom.engine.folders import FolderSpec
from postroom.engine.services import Services

__all__ = ["DEFAULT_FOLDER", "BootstrapReport", "bootstrap"]

DEFAULT_FOLDER = "main"
DEFAULT_PERSONA = (
    "You are Postroom's default agent. Answer helpfully and concisely, in the language the "
    "person writes in."
)


@dataclass(frozen=True, slots=True)
class BootstrapReport:
    created_folder: bool
    route_id: int | None


async def bootstrap(services: Services, *, actor: str) -> BootstrapReport:
    """Create ``main`` and the catch-all route on a fresh database; else do nothing."""
    async with services.store.read() as tx:
        fresh = await tx.catalog_version() == 0
    if not fresh:
        return BootstrapReport(False, None)
    await services.folders.add_folder(
        DEFAULT_FOLDER, FolderSpec(persona=DEFAULT_PERSONA), actor=actor
    )
    route_id = await services.routes.add_route(9999, "", DEFAULT_FOLDER, actor=actor)
    return BootstrapReport(True, route_id)
