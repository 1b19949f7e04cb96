"""Corrections and withdrawals as rows: the only writer of `edition_changes` (one append-only row
per change an operator made to a public edition), and the reads `withdraw`, `correct`, `jobs
show` and `status` make of a slot's editions and their changes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.timefmt import as_date, iso_z, naive_utc
from iipub.model.states import DONE, EditionStatus, Reason, State
from iipub.store import clock, tables

_IN_CHUNK = 500


@dataclass(frozen=True)
class SavedEdition:
    """An `editions` row as an operator's correction or withdrawal reads it."""

    id: int
    job_id: str
    product: str
    edition_date: dt.date
    lang: str
    title: str
    content: str
    sha256: str
    revision: int
    status: EditionStatus
    published_at: dt.datetime  # when it was saved (its first event's publication time)
    public: bool  # a sink has delivered one of its events: readers may have seen it


@dataclass(frozen=True)
class EditionChange:
    """One row of `edition_changes`, as `jobs show` prints it."""

    lang: str
    revision: int
    kind: str
    event_id: str
    reason: str
    public_note: str | None
    changed_by: str
    superseded_sha256: str
    sha256: str | None
    at: str

    def public(self) -> dict[str, Any]:
        return {"lang": self.lang, "revision": self.revision, "kind": self.kind, "event_id": self.event_id,
                "reason": self.reason, "public_note": self.public_note, "by": self.changed_by,
                "supersedes": self.superseded_sha256, "sha256": self.sha256, "at": self.at}


def editions_of(engine: Engine, job_id: str) -> list[SavedEdition]:
    """The job's editions, by language, each with whether it is public: a sink has delivered one
    of its events, or (its events pruned since, `relay --prune`) its language's track or its slot
    is published."""
    ed, o, d, t, j = (tables.editions.c, tables.outbox.c, tables.outbox_deliveries.c, tables.tracks.c,
                      tables.jobs.c)
    delivered = (sa.select(o.id).select_from(tables.outbox.join(tables.outbox_deliveries, d.event_id == o.event_id))
                 .where(o.edition_id == ed.id, d.delivered_at.is_not(None)).exists())
    track_published = sa.select(t.id).where(t.job_id == ed.job_id, t.lang == ed.lang,
                                            t.state == State.PUBLISHED.value).exists()
    slot_published = sa.select(j.id).where(j.id == ed.job_id, j.state.in_([s.value for s in DONE])).exists()
    public = sa.or_(delivered, track_published, slot_published)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(tables.editions, public.label("public"))
                            .where(ed.job_id == job_id).order_by(ed.lang)).mappings().all()
    return [SavedEdition(r["id"], r["job_id"], r["product"], as_date(r["edition_date"]), r["lang"], r["title"],
                         r["content"], r["sha256"], int(r["revision"]), EditionStatus(r["status"]),
                         naive_utc(r["created_at"]), bool(r["public"])) for r in rows]


def record(conn: Connection, edition: SavedEdition, *, revision: int, kind: str, event_id: str, reason: str,
           public_note: str | None, by: str, sha256: str | None) -> None:
    """The change's row, in the transaction that revises the edition (`outbox.revise_edition`)."""
    conn.execute(tables.edition_changes.insert().values(
        edition_id=edition.id, job_id=edition.job_id, lang=edition.lang, revision=revision, kind=kind,
        event_id=event_id, reason=reason, public_note=public_note, changed_by=by[:128],
        superseded_sha256=edition.sha256, superseded_content=edition.content, sha256=sha256,
        created_at=clock.now(conn),
    ))


def changes_of(engine: Engine, job_ids: Sequence[str]) -> dict[str, list[EditionChange]]:
    """Every change made to the jobs' editions, oldest first, by job (one IN list per 500 jobs)."""
    c = tables.edition_changes.c
    out: dict[str, list[EditionChange]] = {}
    ids = list(dict.fromkeys(job_ids))
    with engine.connect() as conn:
        for start in range(0, len(ids), _IN_CHUNK):
            for r in conn.execute(sa.select(tables.edition_changes).where(c.job_id.in_(ids[start:start + _IN_CHUNK]))
                                  .order_by(c.id)).mappings():
                out.setdefault(r["job_id"], []).append(EditionChange(
                    r["lang"], int(r["revision"]), r["kind"], r["event_id"], r["reason"], r["public_note"],
                    r["changed_by"], r["superseded_sha256"], r["sha256"], iso_z(r["created_at"], "seconds")))
    return out


def statuses_of(engine: Engine, job_ids: Sequence[str]) -> dict[str, dict[str, tuple[str, int]]]:
    """job id -> lang -> (status, revision) of the jobs' editions that are not as first published."""
    ed = tables.editions.c
    out: dict[str, dict[str, tuple[str, int]]] = {}
    ids = list(dict.fromkeys(job_ids))
    with engine.connect() as conn:
        for start in range(0, len(ids), _IN_CHUNK):
            for job_id, lang, status, revision in conn.execute(
                    sa.select(ed.job_id, ed.lang, ed.status, ed.revision)
                    .where(ed.job_id.in_(ids[start:start + _IN_CHUNK]),
                           ed.status.in_([EditionStatus.CORRECTED.value, EditionStatus.WITHDRAWN.value]))):
                out.setdefault(job_id, {})[lang] = (status, int(revision))
    return out


CORRECTING = "correcting"


def status_counts(conn: Connection) -> Mapping[str, int]:
    """How many editions are withdrawn and corrected (through `ix_editions_status`: the rows counted
    are only those, never the whole table), and how many slots are being corrected by a paid
    generation (`CORRECTING`: a `correct --regenerate` not saved yet; read through the states of
    slots not published and their own journal)."""
    ed = tables.editions.c
    counts = dict.fromkeys((EditionStatus.WITHDRAWN.value, EditionStatus.CORRECTED.value), 0)
    for status in counts:
        counts[status] = int(conn.execute(sa.select(sa.func.count()).select_from(tables.editions)
                                          .where(ed.status == status)).scalar_one())
    j, ev = tables.jobs.c, tables.job_events.c
    later = tables.job_events.alias("later")
    settled = sa.select(later.c.id).where(
        later.c.job_id == ev.job_id, later.c.lang.is_(None), later.c.id > ev.id,
        later.c.reason.in_((Reason.SAVED.value, Reason.OPERATOR_KILL.value))).exists()
    counts[CORRECTING] = int(conn.execute(
        sa.select(sa.func.count(sa.distinct(j.id))).select_from(tables.jobs.join(tables.job_events, ev.job_id == j.id))
        .where(j.state.in_([s.value for s in State if s not in DONE]),
               ev.reason == Reason.OPERATOR_CORRECT_REGENERATE.value, ev.lang.is_(None), ~settled)).scalar_one())
    return counts
