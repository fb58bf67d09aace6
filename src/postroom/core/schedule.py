"""When a scheduled task runs: the three schedule forms of ``postroom tasks add --schedule``.

- a 5-field cron expression, ``minute hour day-of-month month day-of-week``, read on the wall
  clock of ``tz`` (UTC when there is none);
- ``every N s|m|h``, a fixed interval counted from the task's last run;
- an ISO-8601 time, a one-shot run.

:func:`parse_schedule` validates the text once, when the task is written; the scheduler then
asks the :class:`Schedule` for the next run after a moment it passes in. Nothing here reads the
clock.

Cron and daylight saving time follow cron(8) (cronie, Vixie): a wall time the clocks skip runs
when they jump forward, and a wall time that happens twice runs once, at its first occurrence.
Jobs with ``*`` in the minute or hour field instead follow the clock as it is: skipped minutes do
not run and repeated ones run again, so ``*/15 * * * *`` keeps its 15 minutes of real time
through both changes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from types import MappingProxyType
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# croniter ships no type information; only its class and error type are used.
from croniter import CroniterBadDateError, croniter  # type: ignore[import-untyped]

from postroom.core.errors import InvalidInput

__all__ = ["MAX_INTERVAL_S", "Schedule", "ScheduleError", "ScheduleKind", "parse_schedule"]

ScheduleKind = Literal["cron", "every", "once"]

MAX_INTERVAL_S = 365 * 86400

_FORMS = (
    "a schedule is a 5-field cron expression like '0 9 * * 1-5', 'every N s|m|h' like "
    "'every 5m', or an ISO-8601 time like '2026-12-01T09:00'"
)
_CRON_FIELDS = "minute hour day-of-month month day-of-week"
_SHORTHANDS = MappingProxyType(
    {
        "@YEARLY": "0 0 1 1 *",
        "@ANNUALLY": "0 0 1 1 *",
        "@MONTHLY": "0 0 1 * *",
        "@WEEKLY": "0 0 * * 0",
        "@DAILY": "0 0 * * *",
        "@MIDNIGHT": "0 0 * * *",
        "@HOURLY": "0 * * * *",
    }
)
_UNIT_S = MappingProxyType(
    {
        **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
        **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
        **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    }
)
_EVERY = re.compile(r"every\s*([0-9]+)\s*([a-z]+)")
# A date first (2026-12-01..., or the basic 20261201T...): no cron field looks like that.
_ISO_START = re.compile(r"[0-9]{4}-|[0-9]{8}T")
_CRON_ITEM = re.compile(r"(\*|[0-9A-Z]+(?:-[0-9A-Z]+)?)(?:/([0-9]+))?", re.IGNORECASE | re.ASCII)
# Quartz, Jenkins and croniter extensions (L, W, #, ?, H) have no meaning in standard cron.
_CRON_EXTENSION = re.compile(r"[?#]|\b(?:L|LW|H)\b|[0-9][LW]\b", re.IGNORECASE | re.ASCII)
# Longest month of each month, with February at 29 so a leap-day schedule is allowed.
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAME = re.compile("|".join((*_MONTH_NAMES, *_DAY_NAMES, "L", "W", "H")))


class ScheduleError(InvalidInput):
    """A schedule or time zone that does not parse; the message names the accepted forms."""


class _Problem(Exception):
    """Why a schedule is refused; :func:`parse_schedule` turns it into a :class:`ScheduleError`."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    # Names stand for low, low + 1, ...; noun says what they are in an error message.
    names: tuple[str, ...] = ()
    noun: str = ""


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTH_NAMES, "a month name"),
    # 7 is Sunday as well as 0, as in every crontab.
    _Field("day-of-week", 0, 7, _DAY_NAMES, "a day name"),
)


@dataclass(frozen=True, slots=True)
class _Cron:
    """A parsed cron expression: the value set of each field, and how it meets DST."""

    values: tuple[frozenset[int], ...]
    # cron(8)'s rule: '*' in the minute or hour field means "follow the clock" through DST.
    follows_clock: bool

    @property
    def expression(self) -> str:
        """The expression croniter is given: plain numbers only, ``*`` for a full field.

        Written out like this, croniter never sees the forms it reads differently from cron
        (``1-1`` is the whole field to croniter, ``6-0`` wraps around).
        """
        parts = []
        for field, values in zip(_FIELDS, self.values, strict=True):
            full = len(values) == (7 if field.high == 7 else field.high - field.low + 1)
            parts.append("*" if full else ",".join(str(v) for v in sorted(values)))
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated schedule; build it with :func:`parse_schedule`.

    ``text`` is the normalized source (``parse_schedule(s.text, s.tz) == s``), ``interval_s``
    is set for ``every`` schedules and ``at`` (aware, UTC) for one-shots.
    """

    kind: ScheduleKind
    text: str
    tz: str | None = None
    interval_s: float | None = None
    at: datetime | None = None

    def next_after(self, moment: datetime) -> datetime | None:
        """The next run strictly after ``moment``, as an aware UTC datetime.

        ``every`` schedules count from ``moment`` (the scheduler passes the last run). ``None``
        means no run is left: a one-shot whose time is at or before ``moment``, or a cron
        expression that matches no date any more. ``moment`` must be timezone-aware; a run
        past the year 9999 raises ``OverflowError``, as datetime arithmetic does.
        """
        moment = _as_utc(moment)
        if self.kind == "every":
            return moment + timedelta(seconds=self._interval_s())
        if self.kind == "once":
            at = self._at()
            return at if at > moment else None
        try:
            cron = _parse_cron(self.text.split())
        except _Problem as problem:
            raise ScheduleError(
                f"Cron schedule {_shown(self.text)} is not valid: {problem}."
            ) from None
        return _next_cron(cron, _zone(self.tz), moment)

    def first_after(self, created: datetime) -> datetime | None:
        """The first run of a task created at ``created`` (aware), as an aware UTC datetime.

        Like :meth:`next_after`, except that a one-shot gives its time even when it is already
        past, so an overdue one-shot still runs once.
        """
        created = _as_utc(created)
        if self.kind == "once":
            return self._at()
        return self.next_after(created)

    def describe(self) -> str:
        """A short phrase for listings: ``every 5 minutes``, ``cron 0 9 * * 1-5 (UTC)``,
        ``once at 2026-12-01 09:00 UTC``."""
        zone_name = self.tz or "UTC"
        if self.kind == "every":
            return _describe_interval(self._interval_s())
        if self.kind == "once":
            local = self._at().astimezone(_zone(self.tz))
            shown = local.strftime("%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M")
            return f"once at {shown} {zone_name}"
        return f"cron {self.text} ({zone_name})"

    def _interval_s(self) -> float:
        if self.interval_s is None:
            raise ValueError(f"an 'every' schedule needs interval_s: {self!r}")
        return self.interval_s

    def _at(self) -> datetime:
        if self.at is None:
            raise ValueError(f"a one-shot schedule needs at: {self!r}")
        return _as_utc(self.at)


def parse_schedule(text: str, tz: str | None = None) -> Schedule:
    """Parse one of the three schedule forms; ``tz`` is an IANA zone name such as
    ``Europe/Berlin`` (``None``: UTC).

    Cron expressions run on the wall clock of ``tz``; naive one-shot times are read in ``tz``;
    ``every`` ignores it. Raises :class:`ScheduleError` with one sentence naming the problem
    and the accepted forms.
    """
    zone = _zone(tz)
    source = text.strip()
    try:
        if not source:
            raise _Problem("it is empty")
        if source.lower().startswith("every"):
            return _parse_every(source, tz)
        if _ISO_START.match(source):
            return _parse_once(source, tz, zone)
        return _parse_cron_schedule(source, tz)
    except _Problem as problem:
        raise ScheduleError(
            f"Schedule {_shown(source)} is not valid: {problem}; {_FORMS}."
        ) from None


def _zone(tz: str | None) -> tzinfo:
    if tz is None:
        return UTC
    try:
        return ZoneInfo(tz)
    # ZoneInfo refuses a bad key in several ways: not found (KeyError), malformed (ValueError),
    # or a path the file system will not open (a directory, a name too long: OSError).
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            f"Time zone {_shown(tz)} is not a known IANA time zone name such as "
            "'Europe/Berlin' or 'UTC'."
        ) from None


def _shown(text: str) -> str:
    # Error messages echo the input; a pasted essay should not flood the terminal.
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _as_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC)


# --- every N s|m|h ---------------------------------------------------------------------------


def _parse_every(source: str, tz: str | None) -> Schedule:
    match = _EVERY.fullmatch(source.lower())
    if match is None:
        raise _Problem(
            "it looks like an interval but is not 'every' followed by a whole number and a unit "
            "s, m or h"
        )
    digits, unit = match.groups()
    size = _UNIT_S.get(unit)
    if size is None:
        raise _Problem(f"it looks like an interval but {unit!r} is not a unit (use s, m or h)")
    digits = digits.lstrip("0") or "0"
    if digits == "0":
        raise _Problem("it looks like an interval but N must be at least 1")
    # Compare digit counts first: int() of thousands of digits is refused by Python itself.
    if len(digits) > 10 or int(digits) * size > MAX_INTERVAL_S:
        raise _Problem("it looks like an interval but it is longer than 365 days")
    letter = unit[0]
    return Schedule("every", f"every {digits}{letter}", tz, interval_s=float(int(digits) * size))


def _describe_interval(seconds: float) -> str:
    for size, unit in ((3600, "hour"), (60, "minute"), (1, "second")):
        if seconds % size == 0:
            count = int(seconds // size)
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {seconds:g} seconds"


# --- one-shot ISO-8601 time ------------------------------------------------------------------


def _parse_once(source: str, tz: str | None, zone: tzinfo) -> Schedule:
    upper = source.upper()
    if not re.search(r"[T ][0-9]", upper):
        raise _Problem("it looks like a date but has no time of day (as in 2026-12-01T09:00)")
    try:
        written = datetime.fromisoformat(upper)
    except ValueError as exc:
        detail = str(exc)
        why = "does not parse" if detail.startswith("Invalid isoformat") else detail
        raise _Problem(f"it looks like an ISO-8601 time but {why}") from None
    if written.tzinfo is None:
        text = written.isoformat(timespec=_timespec(written))
        at = _wall_to_utc(written, zone)
    else:
        text = written.isoformat(timespec=_timespec(written)).replace("+00:00", "Z")
        try:
            at = written.astimezone(UTC)
        except OverflowError:
            raise _Problem("it looks like an ISO-8601 time but is out of range") from None
    return Schedule("once", text, tz, at=at)


def _timespec(moment: datetime) -> str:
    if moment.microsecond:
        return "microseconds"
    return "seconds" if moment.second else "minutes"


def _wall_to_utc(wall: datetime, zone: tzinfo) -> datetime:
    """The instant of a naive wall time in ``zone``, by cron(8)'s rule: a repeated time is its
    first occurrence and a skipped time is the moment the clocks jump."""
    first, _, jump = _occurrences(wall, zone)
    return first if jump is None else jump


# --- cron ------------------------------------------------------------------------------------


def _parse_cron_schedule(source: str, tz: str | None) -> Schedule:
    fields = source.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        instead = _SHORTHANDS.get(fields[0].upper())
        if instead is None:
            raise _Problem(f"the cron shorthand {fields[0].lower()} is not supported")
        raise _Problem(
            f"cron shorthands such as {fields[0].lower()} are not supported; write {instead!r}"
        )
    if len(fields) != 5 and not all(_looks_like_cron_field(field) for field in fields):
        raise _Problem("it matches none of the accepted forms")
    if len(fields) == 6:
        raise _Problem(
            f"it looks like a cron expression with seconds (6 fields), but only the standard "
            f"5 fields ({_CRON_FIELDS}) are accepted"
        )
    if len(fields) != 5:
        raise _Problem(
            f"it looks like a cron expression but has {len(fields)} fields "
            f"instead of 5 ({_CRON_FIELDS})"
        )
    cron = _parse_cron(fields)
    _check_day_exists(cron)
    if not croniter.is_valid(cron.expression):  # pragma: no cover - the checks above are stricter
        raise _Problem("it looks like a cron expression but croniter refuses it")
    return Schedule("cron", " ".join(fields).upper(), tz)


def _looks_like_cron_field(field: str) -> bool:
    # Only for choosing the message: "has 4 fields" helps with '* * * *', not with 'tomorrow'.
    return re.fullmatch(r"[0-9*,/?#-]+", _NAME.sub("", field.upper())) is not None


def _parse_cron(fields: Sequence[str]) -> _Cron:
    if len(fields) != 5:
        raise _Problem(f"a cron expression has 5 fields ({_CRON_FIELDS})")
    values = tuple(_parse_field(f, spec) for f, spec in zip(fields, _FIELDS, strict=True))
    return _Cron(values, follows_clock=fields[0].startswith("*") or fields[1].startswith("*"))


def _parse_field(text: str, field: _Field) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(item, field))
    if field.high == 7:
        # Sunday is 0 and 7 alike; croniter and the DST logic see only 0.
        values = {v % 7 for v in values}
    return frozenset(values)


def _parse_item(item: str, field: _Field) -> range:
    prefix = f"it looks like a cron expression but {field.name}"
    if _CRON_EXTENSION.search(item):
        raise _Problem(f"{prefix} {item!r} uses a non-standard cron extension")
    match = _CRON_ITEM.fullmatch(item)
    if match is None:
        allowed = "numbers, names, " if field.names else "numbers, "
        raise _Problem(
            f"{prefix} {item!r} is not understood (use {allowed}*, ranges a-b, steps /n and "
            "lists a,b)"
        )
    base, step_text = match.groups()
    if base == "*":
        # Day-of-week '*' is 0-6: 7 is only another name for Sunday.
        low, high = field.low, min(field.high, 6) if field.high == 7 else field.high
    else:
        first, _, last = base.partition("-")
        low = _value(first, field)
        if last:
            high = _value(last, field)
        else:
            # "5/15" means from 5 to the end of the field, as cronie and croniter read it.
            high = field.high if step_text else low
        if field.high == 7 and high == 0 and low > 0:
            # FRI-SUN and 5-0 end on Sunday: read Sunday as 7 so the range runs forward.
            high = 7
        if low > high:
            raise _Problem(f"{prefix} range {base} runs backwards")
    step = 1
    if step_text is not None:
        step = int(step_text)
        if step == 0:
            raise _Problem(f"{prefix} step /0 must be at least 1")
    return range(low, high + 1, step)


def _value(text: str, field: _Field) -> int:
    prefix = f"it looks like a cron expression but {field.name}"
    if text.isdigit():
        # Compare the length first: int() of thousands of digits is refused by Python itself.
        number = int(text) if len(text) <= 4 else field.high + 1
        if not field.low <= number <= field.high:
            raise _Problem(f"{prefix} {text} is out of range ({field.low}-{field.high})")
        return number
    if text.upper() in field.names:
        return field.low + field.names.index(text.upper())
    what = f"a number or {field.noun}" if field.noun else "a number"
    raise _Problem(f"{prefix} {text!r} is not {what}")


def _check_day_exists(cron: _Cron) -> None:
    # A day-of-month no chosen month has (31 in February) would have croniter search 50 years
    # and give up at every tick; refuse it here. A weekday restriction rescues it: cron runs
    # when either day field matches.
    days, months, weekdays = cron.values[2], cron.values[3], cron.values[4]
    if len(weekdays) < 7 or min(days) <= max(_MONTH_DAYS[m - 1] for m in months):
        return
    names = ", ".join(_MONTH_NAMES[m - 1] for m in sorted(months))
    raise _Problem(
        f"it looks like a cron expression but day-of-month {min(days)} never occurs in {names}"
    )


def _next_cron(cron: _Cron, zone: tzinfo, moment: datetime) -> datetime | None:
    """The first run after ``moment`` (UTC) on the wall clock of ``zone``.

    croniter walks a wall clock without DST (local times dressed as UTC); turning wall times
    into instants happens here, where skipped and repeated times are explicit. croniter's own
    zone handling can return the same or an earlier time inside a repeated hour.
    """
    wall = moment.astimezone(zone).replace(tzinfo=None)
    first, second, _ = _occurrences(wall, zone)
    start = wall
    if second is not None:
        # moment is inside a repeated stretch: an earlier wall time may still have its second
        # occurrence ahead of moment.
        start = wall - (second - first)
    walker = croniter(cron.expression, start.replace(tzinfo=UTC))
    best: datetime | None = None
    while True:
        try:
            candidate = walker.get_next(datetime).replace(tzinfo=None)
        except CroniterBadDateError:
            return None
        first, second, jump = _occurrences(candidate, zone)
        runs: list[datetime]
        if jump is not None:
            runs = [] if cron.follows_clock else [jump]
        elif second is not None and cron.follows_clock:
            runs = [first, second]
        else:
            runs = [first]
        for run in runs:
            if run > moment and (best is None or run < best):
                best = run
        # The earliest instant of a wall time never decreases as the wall time grows, so once
        # it reaches the best run so far no later wall time can beat it.
        earliest = first if jump is None else jump
        if best is not None and earliest >= best:
            return best


def _occurrences(wall: datetime, zone: tzinfo) -> tuple[datetime, datetime | None, datetime | None]:
    """``(first, second, jump)`` for a naive wall time in ``zone``, all aware UTC.

    ``second`` is set when the wall time happens twice (clocks went back); ``jump`` is set, and
    ``first`` meaningless, when the clocks skipped it: the instant they jumped forward.
    """
    earlier_rule = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    later_rule = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if earlier_rule == later_rule:
        return earlier_rule, None, None
    if earlier_rule < later_rule:
        return earlier_rule, later_rule, None
    # Skipped (PEP 495): the old offset puts the wall time after the jump, the new offset
    # before it. Zone transitions fall on whole seconds, so bisect seconds between the two.
    before, after = later_rule, earlier_rule
    new_offset = after.astimezone(zone).utcoffset()
    while after - before > timedelta(seconds=1):
        middle = before + timedelta(seconds=(after - before).total_seconds() // 2)
        if middle.astimezone(zone).utcoffset() == new_offset:
            after = middle
        else:
            before = middle
    return earlier_rule, None, after
