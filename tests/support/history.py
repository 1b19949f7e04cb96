"""Years of history, fast: the rows one really published slot left (a job driven from NO_JOB to
DELETED through the simulator, its tracks, journal, editions, outbox rows and deliveries, spend
row and provider delete), copied for every product and past day with bulk inserts. Each copy is
the slot's rows with new ids, its product and date, and every time moved by the days between
(`tests/integration/store/test_query_plans.py` holds a copy equal to its template but for those).
Used by the plans' test and by bench/cost/history.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from iipub.store import tables

# What one published slot leaves, by table (`runs` and the small tables aside).
SLOT_TABLES = ("jobs", "tracks", "job_events", "editions", "outbox", "outbox_deliveries", "spend",
               "provider_deletes")
_NUMBERED = ("job_events", "editions", "outbox", "outbox_deliveries", "spend", "provider_deletes")


@dataclass(frozen=True)
class Template:
    """The rows of one published slot, by table."""

    job_id: str
    rows: Mapping[str, list[dict[str, Any]]]

    @property
    def date(self) -> dt.date:
        value = self.rows["jobs"][0]["edition_date"]
        return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def template_of(engine: sa.Engine, job_id: str) -> Template:
    """The rows job `job_id` (DELETED: published and cleaned up) left."""
    t = tables
    with engine.connect() as conn:
        def rows(table: sa.Table, where: Any) -> list[dict[str, Any]]:
            return [dict(r) for r in conn.execute(sa.select(table).where(where)).mappings()]

        out = {"jobs": rows(t.jobs, t.jobs.c.id == job_id),
               "tracks": rows(t.tracks, t.tracks.c.job_id == job_id),
               "job_events": rows(t.job_events, t.job_events.c.job_id == job_id),
               "editions": rows(t.editions, t.editions.c.job_id == job_id),
               "outbox": rows(t.outbox, t.outbox.c.job_id == job_id),
               "spend": rows(t.spend, t.spend.c.job_id == job_id),
               "provider_deletes": rows(t.provider_deletes, t.provider_deletes.c.job_id == job_id)}
        events = [r["event_id"] for r in out["outbox"]]
        out["outbox_deliveries"] = rows(t.outbox_deliveries, t.outbox_deliveries.c.event_id.in_(events))
    if not out["jobs"] or out["jobs"][0]["state"] != "DELETED":
        raise ValueError(f"job {job_id} is not a published, cleaned-up slot")
    return Template(job_id, out)


def copy_slot(template: Template, product: str, day: dt.date,
              ids: Callable[[str], int]) -> dict[str, list[dict[str, Any]]]:
    """The template's rows as the slot (`product`, `day`) would have left them: new ids (`ids(table)`
    numbers the autoincrement ones), the product and date, every time moved by the days between."""
    shift = dt.timedelta(days=(day - template.date).days)
    job_id = str(uuid.uuid4())
    old_job = template.job_id
    old_product = template.rows["jobs"][0]["product"]
    responses: dict[str, str] = {}

    def response(old: str | None) -> str | None:
        if old is None:
            return None
        return responses.setdefault(old, f"resp_hist_{uuid.uuid4().hex}")

    def moved(row: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in row.items():
            if isinstance(v, dt.datetime):
                v = v + shift
            elif isinstance(v, dt.date) and k == "edition_date":
                v = day
            out[k] = v
        if "product" in out:
            out["product"] = product
        if "job_id" in out and out["job_id"] == old_job:
            out["job_id"] = job_id
        if "response_id" in out:
            out["response_id"] = response(out["response_id"])
        return out

    def text(value: str) -> str:
        value = value.replace(old_job, job_id).replace(old_product, product)
        for old, new in responses.items():
            value = value.replace(old, new)
        return value

    out: dict[str, list[dict[str, Any]]] = {}
    job = moved(template.rows["jobs"][0])
    job["id"] = job_id
    out["jobs"] = [job]
    out["tracks"] = [{**moved(r), "id": str(uuid.uuid4())} for r in template.rows["tracks"]]
    out["job_events"] = [{**moved(r), "id": ids("job_events")} for r in template.rows["job_events"]]
    editions: dict[int, int] = {}
    out["editions"] = []
    for r in template.rows["editions"]:
        editions[r["id"]] = ids("editions")
        out["editions"].append({**moved(r), "id": editions[r["id"]]})
    event_ids: dict[str, str] = {}
    out["outbox"] = []
    for r in template.rows["outbox"]:
        event_ids[r["event_id"]] = str(uuid.uuid4())
        row = moved(r)
        row.update(id=ids("outbox"), event_id=event_ids[r["event_id"]], edition_id=editions[r["edition_id"]],
                   payload=text(r["payload"]).replace(r["event_id"], event_ids[r["event_id"]]))
        out["outbox"].append(row)
    out["outbox_deliveries"] = [{**moved(r), "id": ids("outbox_deliveries"), "event_id": event_ids[r["event_id"]]}
                                for r in template.rows["outbox_deliveries"]]
    out["spend"] = [{**moved(r), "id": ids("spend")} for r in template.rows["spend"]]
    out["provider_deletes"] = [{**moved(r), "id": ids("provider_deletes")} for r in template.rows["provider_deletes"]]
    return out


# The long texts a slot keeps (its response, its compositions, its editions), which `trimmed`
# copies cut short: no per-minute statement reads them, and years of them are gigabytes to write.
LONG_TEXTS = {"jobs": ("payload", "composed"), "tracks": ("payload", "composed"), "editions": ("content",)}
# Published outbox rows and their deliveries older than this are gone (`relay --prune`'s default
# `prune_after_days`): a slot published longer ago left none.
PRUNED_AFTER_DAYS = 30


def fill(engine: sa.Engine, template: Template, products: Sequence[str], days: Sequence[dt.date], *,
         batch_slots: int = 200, progress: Callable[[int], None] | None = None, trimmed: bool = False,
         today: dt.date | None = None) -> dict[str, int]:
    """Insert a copy of `template` for every product and day, `batch_slots` slots per transaction
    (multi-row inserts); returns the rows written by table. With `today`, the outbox rows of days
    more than `PRUNED_AFTER_DAYS` before it are left out, as the daily prune leaves them; with
    `trimmed`, the long texts are cut to 200 characters."""
    with engine.connect() as conn:
        next_id = {name: int(conn.execute(sa.select(sa.func.max(tables.metadata.tables[name].c.id))).scalar() or 0) + 1
                   for name in _NUMBERED}

    def ids(name: str) -> int:
        value = next_id[name]
        next_id[name] = value + 1
        return value

    written = dict.fromkeys(SLOT_TABLES, 0)
    done = 0
    for chunk in _chunks([(p, d) for d in days for p in products], batch_slots):
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SLOT_TABLES}
        for product, day in chunk:
            pruned = today is not None and (today - day).days > PRUNED_AFTER_DAYS
            for name, copied in copy_slot(template, product, day, ids).items():
                if pruned and name in ("outbox", "outbox_deliveries"):
                    continue
                if trimmed:
                    for row in copied:
                        for column in LONG_TEXTS.get(name, ()):
                            if isinstance(row.get(column), str):
                                row[column] = row[column][:200]
                rows[name].extend(copied)
        with engine.begin() as conn:
            for name in SLOT_TABLES:
                if rows[name]:
                    conn.execute(tables.metadata.tables[name].insert(), rows[name])
                    written[name] += len(rows[name])
        done += len(chunk)
        if progress is not None:
            progress(done)
    return written


def fill_runs(engine: sa.Engine, days: int, now: dt.datetime, *, hosts: int = 1) -> int:
    """What the heartbeats keep (`heartbeat.KEEP_DAYS`, at most a week): a `reconcile` and a `relay`
    run every minute for `days` days before `now`, idle ones."""
    runs = tables.runs
    minutes = min(days, 7) * 1440
    written = 0
    for chunk in _chunks(range(minutes), 5000):
        rows = [{"command": command, "host": f"host{host}", "pid": 1000 + m % 30000,
                 "worker": f"{command}:host{host}:{m}", "started_at": now - dt.timedelta(minutes=minutes - m),
                 "finished_at": now - dt.timedelta(minutes=minutes - m, milliseconds=-40), "ok": True,
                 "summary": '{"idle": true}'}
                for m in chunk for command in ("reconcile", "relay") for host in range(hosts)]
        with engine.begin() as conn:
            conn.execute(runs.insert(), rows)
        written += len(rows)
    return written


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
