"""A public edition's next revision and the `edition.corrected` event that announces a
correction, pure: the same for the operator's file and the sweep's paid generation."""

from __future__ import annotations

import datetime as dt
import json

from iipub.edition.compose import artifact_from_document
from iipub.machine import revision_values
from iipub.model.jobs import Job
from iipub.model.states import EditionStatus, State
from iipub.money.spend import summarize
from tests.unit.operate.test_corrections import _slot

OLD = "a" * 64


class _Edition:
    def __init__(self, lang: str, revision: int, status: EditionStatus = EditionStatus.LIVE) -> None:
        self.lang, self.revision, self.sha256, self.status, self.public = lang, revision, OLD, status, True


def test_the_next_revision_is_past_the_databases_and_the_ledgers() -> None:
    line = {"t": "revised", "slot": "daily-brief/2026-12-01", "attempt": 1, "job_id": "j1", "lang": "en",
            "revision": 3, "kind": "corrected", "sha256": OLD, "event_id": "e3"}
    spend = summarize([json.dumps(line)])[0]["daily-brief/2026-12-01"]
    assert revision_values.next_revision(_Edition("en", 1), spend) == 4
    assert revision_values.next_revision(_Edition("en", 5, EditionStatus.WITHDRAWN), spend) == 6
    assert revision_values.next_revision(_Edition("es", 1), None) == 2


def test_a_correction_names_its_revision_the_sha256_it_supersedes_and_carries_its_artifact() -> None:
    job: Job = _slot(State.DELETED)
    doc = {"title": "T", "summary": "S", "items": [], "lang": "en", "edition_date": "2026-12-01",
           "product": "daily-brief", "sources": []}
    artifact = artifact_from_document(doc)
    at = dt.datetime(2026, 12, 2, 8, 0)
    payload = revision_values.corrected_payload(job, _Edition("en", 1), 2, "e2", dt.datetime(2026, 12, 1, 6, 0), at,
                                                "Fixed.", artifact)
    assert (payload["type"], payload["revision"], payload["supersedes"], payload["sha256"]) == (
        "edition.corrected", 2, OLD, artifact.sha256)
    assert payload["public_note"] == "Fixed." and payload["changed_at"] == "2026-12-02T08:00:00Z"
    assert payload["artifact"] == artifact.document()
