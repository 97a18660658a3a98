"""RFC 3339 dates and date-times as exact, totally ordered keys.

``datetime.fromisoformat`` reads ISO 8601 as Python sees it, not RFC 3339: it refuses the
lower-case ``t``/``z`` separators and leap seconds that RFC 3339 (§5.6, §5.7) allows, and accepts
forms RFC 3339 forbids (naive times, ``2026-W01``). A cross-field rule built on it silently skipped
the values it could not read, so an ``end`` before ``start`` passed when written in lower case.
This module parses the RFC 3339 grammar completely and returns keys that compare exactly (no
float seconds), or None when the text is not RFC 3339, so the caller can refuse instead of skip.
"""

from __future__ import annotations

import re
from decimal import Decimal

# RFC 3339 §5.6; "T" and "Z" may be lower case (§5.6 NOTE). Digits are ASCII only.
_DATE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\Z", re.ASCII)
_DATE_TIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))\Z",
    re.ASCII,
)

DateKey = tuple[int, int, int]
# (UTC seconds since 0000-03-01 with a leap second counted as :59, 1 for a leap second else 0, fraction)
DateTimeKey = tuple[int, int, Decimal]


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 0000-03-01 in the proleptic Gregorian calendar (valid for year 0000 too)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe


def _date(year: str, month: str, day: str) -> DateKey | None:
    y, m, d = int(year), int(month), int(day)
    if not 1 <= m <= 12 or not 1 <= d <= _days_in_month(y, m):
        return None
    return (y, m, d)


def parse_date(text: str) -> DateKey | None:
    """``full-date`` of RFC 3339 as a (year, month, day) key, or None when it is not one."""
    match = _DATE_RE.match(text) if isinstance(text, str) else None
    return _date(*match.groups()) if match else None


def parse_date_time(text: str) -> DateTimeKey | None:
    """``date-time`` of RFC 3339 as an exact UTC key, or None when it is not one.

    A leap second (``:60``) is valid only where it can occur, at 23:59:60 UTC; it orders after
    every instant of 23:59:59 and before the next day's 00:00:00, which a float timestamp cannot
    express.
    """
    match = _DATE_TIME_RE.match(text) if isinstance(text, str) else None
    if not match:
        return None
    year, month, day, hour, minute, second, frac, zulu, sign, off_h, off_m = match.groups()
    date = _date(year, month, day)
    h, mi, s = int(hour), int(minute), int(second)
    if date is None or h > 23 or mi > 59 or s > 60:
        return None
    offset = 0
    if not zulu:
        oh, om = int(off_h), int(off_m)
        if oh > 23 or om > 59:
            return None
        offset = (oh * 60 + om) * (1 if sign == "+" else -1)
    local_minutes = _days_from_civil(*date) * 1440 + h * 60 + mi
    utc_minutes = local_minutes - offset
    if s == 60 and utc_minutes % 1440 != 1439:
        return None
    seconds = utc_minutes * 60 + min(s, 59)
    return (seconds, 1 if s == 60 else 0, Decimal("0." + frac) if frac else Decimal(0))
