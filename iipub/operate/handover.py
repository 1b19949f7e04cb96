"""The hand-over file between iipub and a legacy system (or another iipub): what `iipub adopt`
reads and `iipub export --in-flight` writes. Pure: bytes in, rows and refusals out.

CSV with a header line naming the columns `product,edition_date,response_id` and optionally
`started_at`, `attempts` and `state` (any order), or JSON lines: one object per line with the
same keys. `attempts` is how many paid creates the slot already cost (default 1: the one that
made the response); `started_at` (ISO 8601, UTC unless it says otherwise) and `state` are
informational. Every row is checked on its own: a bad one is refused with one line saying why,
the others go on.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from iipub.core.errors import UsageError
from iipub.core.timefmt import iso_z, naive_utc, parse_date
from iipub.model.jobs import date_outside_window
from iipub.model.states import State

REQUIRED = ("product", "edition_date", "response_id")
COLUMNS = (*REQUIRED, "started_at", "attempts", "state")  # what `export --in-flight` writes, in this order
FORMATS = ("csv", "json")
# An OpenAI response id; the jobs column holds 128 characters.
RESPONSE_ID_RE = re.compile(r"resp_[A-Za-z0-9_-]{1,123}")
MAX_BYTES = 16 * 1024 * 1024
MAX_ROWS = 100_000
MAX_ATTEMPTS = 100
# A legacy edition dated further ahead than this is a typo, not a running generation.
MAX_DAYS_AHEAD = 1


@dataclass(frozen=True)
class Row:
    line: int  # 1-based line of the file (CSV: the header is line 1)
    product: str
    edition_date: dt.date
    response_id: str
    attempts: int = 1
    started_at: dt.datetime | None = None
    state: str | None = None

    @property
    def slot(self) -> str:
        return f"{self.product}/{self.edition_date.isoformat()}"

    def fields(self) -> dict[str, str]:
        """The row as text, the way `render` writes it."""
        return {"product": self.product, "edition_date": self.edition_date.isoformat(),
                "response_id": self.response_id,
                "started_at": iso_z(self.started_at, "seconds") if self.started_at else "",
                "attempts": str(self.attempts), "state": self.state or ""}


@dataclass(frozen=True)
class Refusal:
    line: int
    slot: str  # what the row named (as much of it as could be read)
    why: str

    def text(self) -> str:
        return f"line {self.line} ({self.slot}): refused: {self.why}"


def parse(raw: bytes, products: Collection[str], today: dt.date) -> tuple[list[Row], list[Refusal]]:
    """Every row of a hand-over file, checked: the good rows, and one refusal per bad row (an
    unknown product, a bad date, a malformed response id, a bad count, a duplicate slot or
    response). A file that is not a hand-over file at all raises UsageError."""
    if len(raw) > MAX_BYTES:
        raise UsageError(f"the file is larger than {MAX_BYTES} bytes; split it")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UsageError("the file is not UTF-8 text") from None
    records = _json_lines(text) if text.lstrip().startswith("{") else _csv_rows(text)
    rows: list[Row] = []
    refused: list[Refusal] = []
    by_slot: dict[str, int] = {}
    by_response: dict[str, int] = {}
    for count, (line, record) in enumerate(records, start=1):
        if count > MAX_ROWS:
            raise UsageError(f"more than {MAX_ROWS} rows; split the file")
        if isinstance(record, str):
            refused.append(Refusal(line, "?", record))
            continue
        row = _row(line, record, products, today)
        if isinstance(row, Refusal):
            refused.append(row)
        elif row.slot in by_slot:
            refused.append(Refusal(line, row.slot, f"duplicate: line {by_slot[row.slot]} names the same slot"))
        elif row.response_id in by_response:
            refused.append(Refusal(line, row.slot, f"duplicate: line {by_response[row.response_id]} names the same "
                                                   f"response {row.response_id}"))
        else:
            by_slot[row.slot] = by_response[row.response_id] = line
            rows.append(row)
    return rows, refused


def render(rows: Iterable[Row], fmt: str) -> str:
    """The rows in the format `parse` reads: CSV with a header, or JSON lines."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r} (one of: {', '.join(FORMATS)})")
    if fmt == "json":
        return "".join(json.dumps(_typed(r), sort_keys=False) + "\n" for r in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow(r.fields())
    return out.getvalue()


def _typed(r: Row) -> dict[str, Any]:
    f: dict[str, Any] = dict(r.fields())
    f["attempts"] = r.attempts
    f["started_at"] = f["started_at"] or None
    f["state"] = f["state"] or None
    return f


# -- reading -----------------------------------------------------------------------------------


def _csv_rows(text: str) -> list[tuple[int, Mapping[str, Any] | str]]:
    lines = text.splitlines()
    reader = csv.reader(lines)
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise UsageError("the file is empty (expected a CSV header or JSON lines)") from None
    except csv.Error as exc:
        raise UsageError(f"line 1: not CSV: {exc}") from None
    missing = [c for c in REQUIRED if c not in header]
    unknown = [h for h in header if h not in COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        raise UsageError(f"line 1: the header must name {','.join(REQUIRED)}[,started_at,attempts,state] "
                         f"(got {','.join(header)[:200]!r})")
    out: list[tuple[int, Mapping[str, Any] | str]] = []
    try:
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                out.append((line, f"{len(cells)} fields, the header names {len(header)}"))
                continue
            out.append((line, dict(zip(header, cells, strict=True))))
    except csv.Error as exc:
        raise UsageError(f"line {reader.line_num}: not CSV: {exc}") from None
    return out


def _json_lines(text: str) -> list[tuple[int, Mapping[str, Any] | str]]:
    out: list[tuple[int, Mapping[str, Any] | str]] = []
    for line, chunk in enumerate(text.splitlines(), start=1):
        if not chunk.strip():
            continue
        try:
            doc = json.loads(chunk)
        except ValueError:
            out.append((line, "not a JSON object"))
            continue
        if not isinstance(doc, dict):
            out.append((line, "not a JSON object"))
            continue
        unknown = sorted(str(k) for k in doc if k not in COLUMNS)
        out.append((line, f"unknown key(s): {', '.join(unknown)[:120]}") if unknown else (line, doc))
    return out


def _row(line: int, rec: Mapping[str, Any], products: Collection[str], today: dt.date) -> Row | Refusal:
    product = _text(rec.get("product"))
    date_text = _text(rec.get("edition_date"))
    slot = f"{_shown(product[:64]) or '?'}/{_shown(date_text[:10]) or '?'}"
    if product not in products:
        known = ", ".join(sorted(products)) or "none"
        return Refusal(line, slot, f"unknown product {product[:64]!r} (configured: {known})")
    try:
        day = parse_date(date_text)
    except ValueError:
        return Refusal(line, slot, f"bad edition_date {date_text[:40]!r} (expected YYYY-MM-DD)")
    outside = date_outside_window(day, today)  # the window `schedule --date` keeps, in its words
    if outside is not None:
        return Refusal(line, slot, f"edition_date {outside}")
    if day > today + dt.timedelta(days=MAX_DAYS_AHEAD):
        return Refusal(line, slot, f"edition_date {day} is in the future (today is {today}, database clock)")
    response_id = _text(rec.get("response_id"))
    if not response_id:
        return Refusal(line, slot, "no response_id (a create whose outcome is unknown cannot be adopted: check the "
                                   "provider's dashboard first)")
    if not RESPONSE_ID_RE.fullmatch(response_id):
        return Refusal(line, slot, f"malformed response_id {response_id[:60]!r} (expected resp_ and up to 123 "
                                   "letters, digits, _ or -)")
    attempts = _attempts(rec.get("attempts"))
    if attempts is None:
        return Refusal(line, slot, f"attempts must be a whole number from 1 to {MAX_ATTEMPTS} "
                                   f"(got {str(rec.get('attempts'))[:20]!r})")
    started = _time(rec.get("started_at"))
    if isinstance(started, bool):
        return Refusal(line, slot, f"bad started_at {str(rec.get('started_at'))[:40]!r} (expected ISO 8601)")
    state = _text(rec.get("state")) or None
    if state is not None and state not in State.__members__:
        return Refusal(line, slot, f"unknown state {state[:40]!r}")
    return Row(line, product, day, response_id, attempts, started, state)


def _shown(text: str) -> str:
    """Hostile text as a refusal line shows it: control characters (a NUL, a newline) as `?`, so
    each refusal stays one line."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _attempts(value: Any) -> int | None:
    if value is None or value == "":
        return 1
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        # ASCII digits only: "²" or "١" pass str.isdigit() and fail int(); a long run is no count.
        if not (value.isascii() and value.isdigit() and len(value) <= 3):
            return None
        value = int(value)
    if not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        return None
    return value


def _time(value: Any) -> dt.datetime | bool | None:
    """A naive UTC time, None when absent, False when unreadable."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        return naive_utc(dt.datetime.fromisoformat(value.strip()))
    except (ValueError, OverflowError):  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        return False
