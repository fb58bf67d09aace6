"""Daily budgets (INTERFACES §1 ``budget_per_day``): what a folder's runs may cost in a UTC day.

A folder's budget covers its own runs and those of every folder under it — the per-sender
folders a ``{sender}`` route creates included — so a bot open to many users still has one
ceiling. Costs come from the run records; a run of a model with no known price costs nothing
here (it has no cost), which is why setting a budget on such a folder is answered with a
warning. Once the day's cost reaches a budget, a message that would fire a turn under it is
stored as observed instead (decision ``layer: "limit"``), and its chat is told at most once an
hour per folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from postroom.core.folders import Folder, FolderDefaults, ancestors, effective_settings
from postroom.engine.folders import folder_to_dict
from postroom.llm.models import ModelTable
from postroom.store.protocol import Store, StoreTx

__all__ = [
    "BUDGET_NOTICE_S",
    "BudgetBreach",
    "BudgetService",
    "BudgetStatus",
    "ModelOverrides",
    "budget_notice",
    "day_start",
    "find_breach",
    "unpriced_warning",
    "with_budget_warning",
]

#: A chat hears about a used budget at most this often (per folder).
BUDGET_NOTICE_S = 3600.0


@dataclass(frozen=True, slots=True)
class BudgetBreach:
    """The folder whose budget is used up (the fired folder or one above it)."""

    folder: str
    budget: float
    spent: float

    def describe(self) -> str:
        return (
            f"{self.folder} has used today's budget ({self.spent:.2f} of "
            f"{self.budget:.2f} USD): no turn"
        )


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A budgeted folder's spend so far today."""

    folder: str
    budget: float
    spent: float
    #: Runs today whose model has no price (not counted in ``spent``).
    unpriced_runs: int

    @property
    def reached(self) -> bool:
        return self.spent >= self.budget

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "budget_per_day": self.budget,
            "spent_today": round(self.spent, 6),
            "remaining": round(max(self.budget - self.spent, 0.0), 6),
            "reached": self.reached,
            "unpriced_runs": self.unpriced_runs,
        }


def day_start(now: datetime) -> datetime:
    """Midnight UTC of *now*'s day."""
    moment = now.astimezone(UTC)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def budget_notice(breach: BudgetBreach) -> str:
    """The host message a chat gets when a fired message runs no turn."""
    return (
        f"This agent has used today's budget ({breach.budget:.2f} USD); it answers again after "
        "midnight UTC, and the messages sent meanwhile are kept."
    )


def _budgets(path: str, folders: Mapping[str, Folder]) -> list[tuple[str, float]]:
    """The folders whose budget covers *path*: itself and every folder above it that sets one."""
    found: list[tuple[str, float]] = []
    for candidate in (path, *ancestors(path)):
        folder = folders.get(candidate)
        if folder is not None and folder.budget_per_day is not None:
            found.append((candidate, folder.budget_per_day))
    return found


async def find_breach(
    tx: StoreTx, path: str, folders: Mapping[str, Folder], *, now: datetime
) -> BudgetBreach | None:
    """The first budget over *path* whose day is used up, if any (no query without a budget)."""
    budgets = _budgets(path, folders)
    if not budgets:
        return None
    since = day_start(now)
    for folder, budget in budgets:
        spent, _ = await tx.cost_since(folder, since)
        if spent >= budget:
            return BudgetBreach(folder, budget, spent)
    return None


def unpriced_warning(
    path: str,
    folders: Mapping[str, Folder],
    defaults: FolderDefaults,
    models: ModelTable,
) -> str | None:
    """A sentence when *path* has a budget but its model has no known price."""
    folder = folders.get(path)
    if folder is None or folder.budget_per_day is None:
        return None
    settings = effective_settings(path, folders, defaults)
    model = settings.model
    if model is None and settings.provider == "echo":
        return None  # the built-in echo provider is free
    info = models.info(model)
    if info.input_per_mtok is not None and info.output_per_mtok is not None:
        return None
    named = f"model {model}" if model else f"provider {settings.provider}'s default model"
    return (
        f"Folder {path} has a budget_per_day, but postroom knows no price for {named}, so its "
        f'runs cost nothing against the budget; set [models."<name>"] input_per_mtok and '
        "output_per_mtok, or name a priced model."
    )


#: ``[models."<name>"]`` of the configuration: the keys each section sets.
ModelOverrides = Mapping[str, Mapping[str, Any]]


class BudgetService:
    """Spend against budget for the folders that set one (``postroom usage``, the API), and
    the warning for a budget that cannot work (an unpriced model)."""

    def __init__(
        self,
        *,
        store: Store,
        defaults: FolderDefaults | None = None,
        model_overrides: ModelOverrides | None = None,
    ) -> None:
        self._store = store
        self._defaults = defaults or FolderDefaults()
        known = ModelTable()
        self._models = ModelTable(
            {
                name: replace(known.info(name), **changes)
                for name, changes in (model_overrides or {}).items()
            }
        )

    async def warning(self, path: str) -> str | None:
        """A sentence when *path* has a budget its runs cannot be measured against."""
        async with self._store.read() as tx:
            folders = {folder.path: folder for folder in await tx.list_folders()}
        return unpriced_warning(path, folders, self._defaults, self._models)

    async def today(self, *, now: datetime) -> list[BudgetStatus]:
        since = day_start(now)
        async with self._store.read() as tx:
            folders = await tx.list_folders()
            out: list[BudgetStatus] = []
            for folder in folders:
                if folder.budget_per_day is None:
                    continue
                spent, unpriced = await tx.cost_since(folder.path, since)
                out.append(BudgetStatus(folder.path, folder.budget_per_day, spent, unpriced))
        return out


async def with_budget_warning(budgets: BudgetService, folder: Folder) -> dict[str, Any]:
    """The public folder object of a write, with ``warnings`` when its budget cannot work."""
    answer = folder_to_dict(folder)
    if folder.budget_per_day is not None:
        warning = await budgets.warning(folder.path)
        if warning:
            answer["warnings"] = [warning]
    return answer
