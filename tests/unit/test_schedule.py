"""Task schedules (PIPELINE §7): the three forms, weekday numbering, time zones and daylight saving
time, and every message that refuses a schedule."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postroom.core.errors import InvalidInput
from postroom.core.schedule import (
    MAX_INTERVAL_S,
    Schedule,
    ScheduleError,
    parse_schedule,
)

BERLIN = "Europe/Berlin"
FORMS = "a schedule is a 5-field cron expression like '0 9 * * 1-5'"


def utc(text: str) -> datetime:
    """``2026-01-07T09:00Z`` → an aware UTC datetime; keeps the tables short."""
    return datetime.fromisoformat(text).astimezone(UTC)


def runs(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    moment = after
    for _ in range(count):
        following = schedule.next_after(moment)
        assert following is not None
        out.append(following)
        moment = following
    return out


# --- cron: weekdays, fields, zones and DST ----------------------------------------------------

# 2026-01-07 is a Wednesday; 2026-01-11 a Sunday; 2026-01-12 a Monday.
CRON_CASES = [
    # Weekday numbering: 0 and 7 are Sunday, 1 is Monday (APScheduler's from_crontab differs).
    ("0 9 * * 1", None, "2026-01-07T00:00Z", ["2026-01-12T09:00Z", "2026-01-19T09:00Z"]),
    ("0 9 * * 0", None, "2026-01-07T00:00Z", ["2026-01-11T09:00Z", "2026-01-18T09:00Z"]),
    ("0 9 * * 7", None, "2026-01-07T00:00Z", ["2026-01-11T09:00Z", "2026-01-18T09:00Z"]),
    ("0 9 * * sun", None, "2026-01-07T00:00Z", ["2026-01-11T09:00Z"]),
    ("0 9 * * 0,7", None, "2026-01-07T00:00Z", ["2026-01-11T09:00Z", "2026-01-18T09:00Z"]),
    ("0 9 * * 6", None, "2026-01-07T00:00Z", ["2026-01-10T09:00Z"]),
    (
        "0 9 * * 1-5",
        None,
        "2026-01-09T10:00Z",
        ["2026-01-12T09:00Z", "2026-01-13T09:00Z"],
    ),
    (
        "0 9 * * MON-FRI/2",
        None,
        "2026-01-07T10:00Z",
        ["2026-01-09T09:00Z", "2026-01-12T09:00Z", "2026-01-14T09:00Z"],
    ),
    # A range ending on Sunday runs forward, whether Sunday is written SUN, 0 or 7.
    (
        "0 9 * * FRI-SUN",
        None,
        "2026-01-07T00:00Z",
        ["2026-01-09T09:00Z", "2026-01-10T09:00Z", "2026-01-11T09:00Z", "2026-01-16T09:00Z"],
    ),
    ("0 9 * * 5-0", None, "2026-01-11T10:00Z", ["2026-01-16T09:00Z", "2026-01-17T09:00Z"]),
    ("0 9 * * 5-7", None, "2026-01-11T10:00Z", ["2026-01-16T09:00Z", "2026-01-17T09:00Z"]),
    # Minute and hour fields, steps, lists; strictly after the moment.
    ("*/15 * * * *", None, "2026-01-01T00:07:30Z", ["2026-01-01T00:15Z", "2026-01-01T00:30Z"]),
    ("*/15 * * * *", None, "2026-01-01T00:15Z", ["2026-01-01T00:30Z"]),
    ("5/20 * * * *", None, "2026-01-01T00:00Z", ["2026-01-01T00:05Z", "2026-01-01T00:25Z"]),
    # croniter alone reads 1-1 as the whole field; postroom means minute 1.
    ("1-1 * * * *", None, "2026-01-01T00:00Z", ["2026-01-01T00:01Z", "2026-01-01T01:01Z"]),
    ("0 8-17/3 * * *", None, "2026-01-01T09:00Z", ["2026-01-01T11:00Z", "2026-01-01T14:00Z"]),
    (
        "0 0 1 jan,Jul *",
        None,
        "2026-01-01T00:00Z",
        ["2026-07-01T00:00Z", "2027-01-01T00:00Z"],
    ),
    ("0 0 29 2 *", None, "2026-01-01T00:00Z", ["2028-02-29T00:00Z", "2032-02-29T00:00Z"]),
    # Both day fields restricted: either one matching is enough (2026-01-15 is a Thursday).
    (
        "0 0 1,15 * 1",
        None,
        "2026-01-01T00:00Z",
        ["2026-01-05T00:00Z", "2026-01-12T00:00Z", "2026-01-15T00:00Z", "2026-01-19T00:00Z"],
    ),
    ("0 0 31 2 1", None, "2026-02-01T00:00Z", ["2026-02-02T00:00Z"]),
    # Wall clock of the zone: 09:00 in Berlin is 08:00 UTC in winter, 07:00 UTC in summer.
    ("0 9 * * *", BERLIN, "2026-01-10T00:00Z", ["2026-01-10T08:00Z", "2026-01-11T08:00Z"]),
    ("0 9 * * *", BERLIN, "2026-07-10T00:00Z", ["2026-07-10T07:00Z", "2026-07-11T07:00Z"]),
    ("0 9 * * 1-5", "America/New_York", "2026-01-09T15:00Z", ["2026-01-12T14:00Z"]),
    ("0 9 * * *", "UTC", "2026-07-10T00:00Z", ["2026-07-10T09:00Z"]),
    # Clocks go forward (Berlin, 2026-03-29 02:00 → 03:00, at 01:00 UTC): a skipped fixed time
    # runs when the clocks jump, ...
    (
        "30 2 * * *",
        BERLIN,
        "2026-03-28T12:00Z",
        ["2026-03-29T01:00Z", "2026-03-30T00:30Z", "2026-03-31T00:30Z"],
    ),
    # ... while a '*' schedule keeps its pace in real time.
    (
        "*/30 * * * *",
        BERLIN,
        "2026-03-28T23:40Z",
        ["2026-03-29T00:00Z", "2026-03-29T00:30Z", "2026-03-29T01:00Z", "2026-03-29T01:30Z"],
    ),
    # Clocks go back (Berlin, 2026-10-25 03:00 → 02:00, at 01:00 UTC): a repeated fixed time
    # runs once, at its first occurrence, ...
    (
        "30 2 * * *",
        BERLIN,
        "2026-10-24T12:00Z",
        ["2026-10-25T00:30Z", "2026-10-26T01:30Z"],
    ),
    ("30 2 * * *", BERLIN, "2026-10-25T01:10Z", ["2026-10-26T01:30Z"]),
    # ... while a '*' schedule runs through the repeated hour again.
    (
        "0 * * * *",
        BERLIN,
        "2026-10-24T23:30Z",
        ["2026-10-25T00:00Z", "2026-10-25T01:00Z", "2026-10-25T02:00Z"],
    ),
    # From the first pass of the repeated hour, 02:15's second occurrence is the next run.
    ("15 * * * *", BERLIN, "2026-10-25T00:20Z", ["2026-10-25T01:15Z", "2026-10-25T02:15Z"]),
    ("*/15 * * * *", BERLIN, "2026-10-25T01:20Z", ["2026-10-25T01:30Z", "2026-10-25T01:45Z"]),
    # Half-hour DST (Lord Howe, 2026-10-04 02:00 → 02:30 at 15:30 UTC the day before).
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T00:00Z",
        ["2026-10-03T15:30Z", "2026-10-04T15:15Z"],
    ),
    # A whole day skipped (Samoa moved across the date line: 2011-12-30 never happened).
    (
        "0 9 * * *",
        "Pacific/Apia",
        "2011-12-29T12:00Z",
        ["2011-12-29T19:00Z", "2011-12-30T10:00Z", "2011-12-30T19:00Z"],
    ),
]


@pytest.mark.parametrize(("text", "tz", "after", "expected"), CRON_CASES)
def test_cron_runs(text: str, tz: str | None, after: str, expected: list[str]) -> None:
    schedule = parse_schedule(text, tz)
    assert schedule.kind == "cron"
    assert schedule.interval_s is None
    got = runs(schedule, utc(after), len(expected))
    assert got == [utc(e) for e in expected]
    assert all(run.tzinfo is UTC for run in got)


def test_monday_is_1_and_fires_at_nine_utc() -> None:
    run = parse_schedule("0 9 * * 1").next_after(utc("2026-01-07T12:00Z"))
    assert run is not None
    assert (run.weekday(), run.hour, run.minute, run.utcoffset()) == (0, 9, 0, timedelta(0))


def test_moment_may_be_given_in_any_zone() -> None:
    schedule = parse_schedule("0 9 * * *", BERLIN)
    in_tokyo = datetime(2026, 1, 10, 9, 0, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert schedule.next_after(in_tokyo) == schedule.next_after(in_tokyo.astimezone(UTC))


def test_cron_first_run_is_the_next_match() -> None:
    schedule = parse_schedule("0 9 * * *")
    assert schedule.first_after(utc("2026-01-10T09:00Z")) == utc("2026-01-11T09:00Z")
    assert schedule.first_after(utc("2026-01-10T08:59:59Z")) == utc("2026-01-10T09:00Z")


@pytest.mark.parametrize(
    ("text", "tz", "normalized", "described"),
    [
        ("0 9 * * 1-5", BERLIN, "0 9 * * 1-5", "cron 0 9 * * 1-5 (Europe/Berlin)"),
        ("  0  9 * *   mon-fri ", None, "0 9 * * MON-FRI", "cron 0 9 * * MON-FRI (UTC)"),
        ("*/5\t* * * *", "UTC", "*/5 * * * *", "cron */5 * * * * (UTC)"),
    ],
)
def test_cron_text_and_description(
    text: str, tz: str | None, normalized: str, described: str
) -> None:
    schedule = parse_schedule(text, tz)
    assert (schedule.text, schedule.tz, schedule.describe()) == (normalized, tz, described)


def test_a_cron_that_can_never_match_again_has_no_next_run() -> None:
    # parse_schedule refuses it; a row written some other way must not loop or crash the tick.
    assert Schedule("cron", "0 0 31 2 *").next_after(utc("2026-01-01T00:00Z")) is None


def test_a_stored_cron_that_does_not_parse_raises_schedule_error() -> None:
    for text in ["61 * * * *", "* * *"]:
        with pytest.raises(ScheduleError, match=r"Cron schedule .* is not valid"):
            Schedule("cron", text).next_after(utc("2026-01-01T00:00Z"))


# --- every N s|m|h --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "interval_s", "normalized", "described"),
    [
        ("every 90s", 90, "every 90s", "every 90 seconds"),
        ("every 5 m", 300, "every 5m", "every 5 minutes"),
        ("every 2h", 7200, "every 2h", "every 2 hours"),
        ("EVERY 2H", 7200, "every 2h", "every 2 hours"),
        ("  every   10   min ", 600, "every 10m", "every 10 minutes"),
        ("every 5 minutes", 300, "every 5m", "every 5 minutes"),
        ("every 1 hour", 3600, "every 1h", "every hour"),
        ("every 1m", 60, "every 1m", "every minute"),
        ("every 1s", 1, "every 1s", "every second"),
        ("every 120s", 120, "every 120s", "every 2 minutes"),
        ("every 005m", 300, "every 5m", "every 5 minutes"),
        ("every30s", 30, "every 30s", "every 30 seconds"),
        ("every 8760h", MAX_INTERVAL_S, "every 8760h", "every 8760 hours"),
        ("every 31536000s", MAX_INTERVAL_S, "every 31536000s", "every 8760 hours"),
    ],
)
def test_every_forms(text: str, interval_s: float, normalized: str, described: str) -> None:
    schedule = parse_schedule(text)
    assert schedule.kind == "every"
    assert schedule.interval_s == interval_s
    assert (schedule.text, schedule.describe()) == (normalized, described)


def test_every_counts_from_the_moment_given() -> None:
    schedule = parse_schedule("every 90s", BERLIN)
    last_run = datetime(2026, 3, 29, 1, 59, tzinfo=ZoneInfo(BERLIN))
    assert schedule.next_after(last_run) == utc("2026-03-29T01:00:30Z")
    assert schedule.first_after(last_run) == utc("2026-03-29T01:00:30Z")
    run = schedule.next_after(last_run)
    assert run is not None
    assert run.tzinfo is UTC


def test_every_with_an_odd_stored_interval_still_describes_itself() -> None:
    assert Schedule("every", "every 1.5s", interval_s=1.5).describe() == "every 1.5 seconds"


# --- one-shot ISO-8601 times ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tz", "at", "normalized", "described"),
    [
        (
            "2026-12-01T09:00",
            None,
            "2026-12-01T09:00Z",
            "2026-12-01T09:00",
            "once at 2026-12-01 09:00 UTC",
        ),
        (
            "2026-12-01T09:00",
            BERLIN,
            "2026-12-01T08:00Z",
            "2026-12-01T09:00",
            "once at 2026-12-01 09:00 Europe/Berlin",
        ),
        (
            "2026-12-01T09:00:00Z",
            None,
            "2026-12-01T09:00Z",
            "2026-12-01T09:00Z",
            "once at 2026-12-01 09:00 UTC",
        ),
        # An explicit offset wins over tz; tz still chooses how it is shown.
        (
            "2026-12-01T09:00:00Z",
            BERLIN,
            "2026-12-01T09:00Z",
            "2026-12-01T09:00Z",
            "once at 2026-12-01 10:00 Europe/Berlin",
        ),
        (
            "2026-12-01 09:00+01:00",
            None,
            "2026-12-01T08:00Z",
            "2026-12-01T09:00+01:00",
            "once at 2026-12-01 08:00 UTC",
        ),
        (
            "2026-12-01t09:00:30z",
            None,
            "2026-12-01T09:00:30Z",
            "2026-12-01T09:00:30Z",
            "once at 2026-12-01 09:00:30 UTC",
        ),
        (
            "2026-12-01T09:00:00.250-05:00",
            None,
            "2026-12-01T14:00:00.250Z",
            "2026-12-01T09:00:00.250000-05:00",
            "once at 2026-12-01 14:00 UTC",
        ),
        ("20261201T0900", None, "2026-12-01T09:00Z", "2026-12-01T09:00", None),
        # A wall time the clocks skip runs when they jump; a repeated one at its first occurrence.
        ("2026-03-29T02:30", BERLIN, "2026-03-29T01:00Z", "2026-03-29T02:30", None),
        ("2026-10-25T02:30", BERLIN, "2026-10-25T00:30Z", "2026-10-25T02:30", None),
    ],
)
def test_once_forms(
    text: str, tz: str | None, at: str, normalized: str, described: str | None
) -> None:
    schedule = parse_schedule(text, tz)
    assert schedule.kind == "once"
    assert schedule.interval_s is None
    assert schedule.at == utc(at)
    assert schedule.text == normalized
    if described is not None:
        assert schedule.describe() == described


def test_once_runs_once() -> None:
    schedule = parse_schedule("2026-12-01T09:00Z")
    at = utc("2026-12-01T09:00Z")
    assert schedule.next_after(at - timedelta(microseconds=1)) == at
    assert schedule.next_after(at) is None
    assert schedule.next_after(at + timedelta(days=1)) is None


def test_an_overdue_one_shot_still_runs_once() -> None:
    schedule = parse_schedule("2026-12-01T09:00Z")
    created = utc("2027-01-01T00:00Z")
    assert schedule.first_after(created) == utc("2026-12-01T09:00Z")
    assert schedule.next_after(created) is None


# --- round trip and misuse ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tz"),
    [
        ("0 9 * * mon-fri", BERLIN),
        ("*/15 * * * *", None),
        ("every 5 Minutes", None),
        ("every 90s", BERLIN),
        ("2026-12-01T09:00", BERLIN),
        ("2026-12-01 09:00:30.5+01:00", None),
        ("2026-12-01T09:00:00Z", "America/New_York"),
    ],
)
def test_normalized_text_parses_to_the_same_schedule(text: str, tz: str | None) -> None:
    schedule = parse_schedule(text, tz)
    assert parse_schedule(schedule.text, schedule.tz) == schedule


@pytest.mark.parametrize("text", ["0 9 * * *", "every 5m", "2026-12-01T09:00"])
def test_a_naive_moment_is_misuse(text: str) -> None:
    schedule = parse_schedule(text)
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule.next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule.first_after(datetime(2026, 1, 1))


def test_a_half_built_schedule_is_misuse() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        Schedule("every", "every 5m").next_after(utc("2026-01-01T00:00Z"))
    with pytest.raises(ValueError, match="needs at"):
        Schedule("once", "2026-01-01T00:00").describe()


# --- rejections -----------------------------------------------------------------------------

REJECTED = [
    ("", "it is empty"),
    ("   ", "it is empty"),
    ("tomorrow at nine", "it matches none of the accepted forms"),
    ("next monday 9am", "it matches none of the accepted forms"),
    # cron
    ("61 * * * *", "it looks like a cron expression but minute 61 is out of range (0-59)"),
    ("0 24 * * *", "hour 24 is out of range (0-23)"),
    ("0 0 0 * *", "day-of-month 0 is out of range (1-31)"),
    ("0 0 32 * *", "day-of-month 32 is out of range (1-31)"),
    ("0 0 * 13 *", "month 13 is out of range (1-12)"),
    ("0 0 * * 8", "day-of-week 8 is out of range (0-7)"),
    ("99999999999 * * * *", "minute 99999999999 is out of range (0-59)"),
    ("* * * * * *", "cron expression with seconds (6 fields)"),
    ("0 0 9 * * 1", "only the standard 5 fields"),
    ("* * * *", "has 4 fields instead of 5 (minute hour day-of-month month day-of-week)"),
    ("0 0 1 1 * 2026 *", "has 7 fields instead of 5"),
    ("0 9 * * monday", "day-of-week 'monday' is not a number or a day name"),
    ("0 9 * FOO *", "month 'FOO' is not a number or a month name"),
    ("MON 9 * * *", "minute 'MON' is not a number"),
    ("5-1 * * * *", "minute range 5-1 runs backwards"),
    ("0 0 * * SAT-MON", "day-of-week range SAT-MON runs backwards"),
    ("*/0 * * * *", "minute step /0 must be at least 1"),
    ("1,,2 * * * *", "minute '' is not understood"),
    ("*/x * * * *", "minute '*/x' is not understood (use numbers, *, ranges"),
    ("0 0 * jan+1 *", "(use numbers, names, *, ranges"),
    ("0 0 L * *", "day-of-month 'L' uses a non-standard cron extension"),
    ("0 0 l * *", "day-of-month 'l' uses a non-standard cron extension"),
    ("0 0 15W * *", "'15W' uses a non-standard cron extension"),
    ("0 0 * * 5#2", "day-of-week '5#2' uses a non-standard cron extension"),
    ("0 0 ? * 1", "'?' uses a non-standard cron extension"),
    ("H * * * *", "minute 'H' uses a non-standard cron extension"),
    ("0 0 31 2 *", "day-of-month 31 never occurs in FEB"),
    ("0 0 30-31 2 *", "day-of-month 30 never occurs in FEB"),
    ("0 0 31 4,6,9,11 *", "day-of-month 31 never occurs in APR, JUN, SEP, NOV"),
    ("@daily", "cron shorthands such as @daily are not supported; write '0 0 * * *'"),
    ("@HOURLY", "cron shorthands such as @hourly are not supported; write '0 * * * *'"),
    ("@reboot", "the cron shorthand @reboot is not supported"),
    # every
    ("every", "it looks like an interval but is not 'every' followed by a whole number"),
    ("every 1.5h", "is not 'every' followed by a whole number and a unit s, m or h"),
    ("every -5m", "is not 'every' followed by a whole number"),
    ("every five minutes", "is not 'every' followed by a whole number"),
    ("every 2d", "it looks like an interval but 'd' is not a unit (use s, m or h)"),
    ("every 0m", "it looks like an interval but N must be at least 1"),
    ("every 8761h", "it looks like an interval but it is longer than 365 days"),
    ("every 99999999999999999999s", "it is longer than 365 days"),
    # once
    ("2026-12-01", "it looks like a date but has no time of day"),
    ("2026-13-01T09:00", "it looks like an ISO-8601 time but month must be in 1..12"),
    ("2026-12-01T25:00", "it looks like an ISO-8601 time but hour must be in 0..23"),
    ("2026-12-01T09:00 tomorrow", "it looks like an ISO-8601 time but does not parse"),
    ("0001-01-01T00:00+01:00", "it looks like an ISO-8601 time but is out of range"),
]


@pytest.mark.parametrize(("text", "problem"), REJECTED)
def test_rejections_name_the_problem_and_the_forms(text: str, problem: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(text)
    message = str(caught.value)
    assert message.startswith(f"Schedule {text.strip()!r} is not valid: ")
    assert problem in message
    assert FORMS in message
    assert "'every N s|m|h'" in message
    assert "ISO-8601 time like '2026-12-01T09:00'" in message
    assert message.endswith(".")
    assert "\n" not in message
    assert isinstance(caught.value, InvalidInput)


def test_a_long_schedule_is_shortened_in_the_message() -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("x" * 5000)
    assert len(str(caught.value)) < 400
    assert "'xxx" in str(caught.value)


@pytest.mark.parametrize("tz", ["Mars/Base", "Europe", "europe/berlin", "", "../etc/passwd"])
def test_an_unknown_time_zone_is_named(tz: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("0 9 * * *", tz)
    assert str(caught.value) == (
        f"Time zone {tz!r} is not a known IANA time zone name such as 'Europe/Berlin' or 'UTC'."
    )


def test_an_absurdly_long_time_zone_is_refused_without_echoing_it_whole() -> None:
    with pytest.raises(ScheduleError, match="is not a known IANA time zone") as caught:
        parse_schedule("every 5m", "a" * 300)
    assert len(str(caught.value)) < 200


# --- properties -----------------------------------------------------------------------------

# Each field as (text, the values it means); None means "every value" (an unrestricted field).
MINUTES = [("*", None), ("*/15", {0, 15, 30, 45}), ("5,35", {5, 35}), ("0-10/5", {0, 5, 10}),
           ("59", {59}), ("1-1", {1})]  # fmt: skip
HOURS = [("*", None), ("9", {9}), ("*/6", {0, 6, 12, 18}), ("1-3", {1, 2, 3}), ("2", {2}),
         ("22-23", {22, 23})]  # fmt: skip
DAYS = [("*", None), ("1", {1}), ("*/10", {1, 11, 21, 31}), ("15-16", {15, 16}), ("29", {29}),
        ("31", {31})]  # fmt: skip
MONTHS = [("*", None), ("JAN-JUN", {1, 2, 3, 4, 5, 6}), ("*/2", {1, 3, 5, 7, 9, 11}),
          ("feb", {2}), ("12", {12})]  # fmt: skip
# Python's weekday(): Monday = 0 ... Sunday = 6.
WEEKDAYS = [("*", None), ("1-5", {0, 1, 2, 3, 4}), ("0", {6}), ("7", {6}), ("SAT,SUN", {5, 6}),
            ("MON-FRI/2", {0, 2, 4}), ("FRI-SUN", {4, 5, 6})]  # fmt: skip

ZONES = [
    None,
    "UTC",
    BERLIN,
    "America/New_York",
    "America/St_Johns",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Apia",
    "America/Santiago",
]

Field = tuple[str, set[int] | None]


@st.composite
def crons(draw: st.DrawFn) -> tuple[str, tuple[Field, ...]]:
    fields = tuple(draw(st.sampled_from(options)) for options in (MINUTES, HOURS, DAYS, MONTHS,
                                                                  WEEKDAYS))  # fmt: skip
    text = " ".join(text for text, _ in fields)
    # Day 31 alone in February-only months is refused at parse time; keep to valid ones.
    days, months, weekdays = fields[2][1], fields[3][1], fields[4][1]
    if weekdays is None and days is not None and months == {2} and min(days) > 29:
        fields = (*fields[:2], ("1", {1}), *fields[3:])
        text = " ".join(text for text, _ in fields)
    return text, fields


def _matches(values: set[int] | None, value: int) -> bool:
    return values is None or value in values


def day_matches(fields: tuple[Field, ...], day: date) -> bool:
    """Cron's day rule: with both day fields restricted, either one matching is enough."""
    days, months, weekdays = fields[2][1], fields[3][1], fields[4][1]
    if not _matches(months, day.month):
        return False
    if days is not None and weekdays is not None:
        return day.day in days or day.weekday() in weekdays
    return _matches(days, day.day) and _matches(weekdays, day.weekday())


def reference_next(fields: tuple[Field, ...], moment: datetime) -> datetime:
    """The first matching minute strictly after ``moment``, found day by day (UTC only)."""
    hours = sorted(fields[1][1] or range(24))
    minutes = sorted(fields[0][1] or range(60))
    day = moment.date()
    for _ in range(366 * 9):
        if day_matches(fields, day):
            for hour in hours:
                for minute in minutes:
                    run = datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
                    if run > moment:
                        return run
        day += timedelta(days=1)
    raise AssertionError("no match within nine years")


MOMENTS = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2060, 12, 31), timezones=st.just(UTC)
)


@given(cron=crons(), moment=MOMENTS)
def test_cron_in_utc_agrees_with_a_reference(
    cron: tuple[str, tuple[Field, ...]], moment: datetime
) -> None:
    text, fields = cron
    assert parse_schedule(text).next_after(moment) == reference_next(fields, moment)


@given(
    cron=crons(),
    tz=st.sampled_from(ZONES),
    moment=st.datetimes(
        min_value=datetime(1990, 1, 1),
        max_value=datetime(2060, 12, 31),
        timezones=st.sampled_from([UTC, ZoneInfo(BERLIN), ZoneInfo("Australia/Lord_Howe")]),
    ),
)
def test_cron_runs_strictly_later_on_a_matching_wall_time(
    cron: tuple[str, tuple[Field, ...]], tz: str | None, moment: datetime
) -> None:
    text, fields = cron
    schedule = parse_schedule(text, tz)
    first = schedule.next_after(moment)
    assert first is not None
    assert first.tzinfo is UTC
    assert first > moment
    second = schedule.next_after(first)
    assert second is not None
    assert second > first
    zone = ZoneInfo(tz or "UTC")
    wall = first.astimezone(zone)
    jumped = (first - timedelta(seconds=1)).astimezone(zone).utcoffset() != wall.utcoffset()
    on_time = (
        day_matches(fields, wall.date())
        and _matches(fields[1][1], wall.hour)
        and _matches(fields[0][1], wall.minute)
    )
    # Either the wall clock shows a matching time, or this is the instant the clocks jumped
    # over one.
    assert on_time or jumped


@given(
    count=st.integers(min_value=1, max_value=500),
    unit=st.sampled_from(["s", "m", "h"]),
    moment=st.datetimes(timezones=st.sampled_from([UTC, ZoneInfo(BERLIN)])).filter(
        lambda m: m.year < 9999
    ),
)
def test_every_runs_one_interval_after_the_moment(count: int, unit: str, moment: datetime) -> None:
    schedule = parse_schedule(f"every {count}{unit}")
    run = schedule.next_after(moment)
    assert run is not None
    assert run.tzinfo is UTC
    assert run > moment
    assert run - moment == timedelta(seconds={"s": 1, "m": 60, "h": 3600}[unit] * count)
    assert parse_schedule(schedule.text) == schedule


@given(cron=crons(), tz=st.sampled_from(ZONES))
def test_cron_text_round_trips(cron: tuple[str, tuple[Field, ...]], tz: str | None) -> None:
    schedule = parse_schedule(cron[0].lower(), tz)
    assert parse_schedule(schedule.text, schedule.tz) == schedule
