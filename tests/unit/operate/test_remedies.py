"""`remedies.parse_import` and `remedies.import_payload`, pure: what a recovered-output file may
hold, and that its custody is exactly a poll's (`handlers.on_output`)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import pytest

from iipub.core.errors import OperatorRefused
from iipub.machine import decisions
from iipub.model import states
from iipub.model.jobs import Job
from iipub.model.states import Reason, State
from iipub.operate import remedies
from iipub.provider.openai import documents
from iipub.provider.outcomes import Observed, Stage, Usage

EDITION = json.dumps({"en": {"title": "T", "summary": "S", "items": []}}, ensure_ascii=False)


def parse(raw: bytes, max_output_bytes: int) -> remedies.Imported:
    """`remedies.parse_import` with OpenAI's reader of saved responses, as the executor passes it."""
    return remedies.parse_import(raw, max_output_bytes, documents.read_saved)


def response(text: str, **extra: object) -> dict[str, object]:
    return {"id": "resp_1", "object": "response", "status": "completed", "metadata": {"iipub_job_id": "job-1"},
            "usage": {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8},
            "output": [{"type": "reasoning", "summary": []},
                       {"type": "message", "content": [{"type": "output_text", "text": text[:5]},
                                                       {"type": "refusal", "refusal": "no"},
                                                       {"type": "output_text", "text": text[5:]}]}],
            **extra}


def job(state: State = State.QUARANTINED, **values: object) -> Job:
    now = dt.datetime(2026, 12, 1, 6, 0)
    base: dict[str, object] = {
        "id": "job-1", "product": "daily-brief", "edition_date": dt.date(2026, 12, 1), "state": state.value,
        "version": 7, "priority": 10, "is_backfill": False, "opens_at": now, "next_attempt_at": now,
        "generation_attempts": 1, "poll_count": 0, "retry_count": 0, "input_tokens": 0, "output_tokens": 0,
        "total_tokens": 0, "kill_requested": False, "created_at": now, "updated_at": now, "state_entered_at": now,
        "quarantine_reason": "create_outcome_unknown", **values,
    }
    return Job.from_row({f: base.get(f) for f in Job.__dataclass_fields__})


def test_the_three_forms() -> None:
    as_text = parse(EDITION.encode(), 10_000)
    assert (as_text.text, as_text.source, as_text.response_id) == (EDITION, "text", None)
    wrapped = parse(json.dumps({"output_text": EDITION}).encode(), 10_000)
    assert (wrapped.text, wrapped.source) == (EDITION, "output_text")
    resp = parse(json.dumps(response(EDITION), indent=2).encode(), 10_000)
    assert (resp.text, resp.source, resp.response_id, resp.status) == (EDITION, "response", "resp_1", "completed")
    assert resp.usage == Usage(3, 5, 8) and resp.metadata == {"iipub_job_id": "job-1"}
    # A response object that also carries the SDK's `output_text` is read from that string.
    both = parse(json.dumps(response("ignored!!", output_text=EDITION)).encode(), 10_000)
    assert (both.text, both.source, both.response_id) == (EDITION, "output_text", "resp_1")


def test_a_byte_order_mark_and_malformed_json_are_text() -> None:
    assert parse(b"\xef\xbb\xbf" + EDITION.encode(), 10_000).text == EDITION
    broken = '{"en": {"title": '
    assert parse(broken.encode(), 10_000).text == broken  # validation will judge it
    assert parse(b'{"output_text": "x", "usage": {"total_tokens": true}}', 10).usage is None


@pytest.mark.parametrize(("raw", "needle"), [
    (b"\xff\xfe", "not UTF-8"),
    (b"   ", "no output text"),
    (b'{"output_text": ""}', "no output text"),
    (b'{"output_text": null}', "not a string"),
    (json.dumps(response(EDITION, status="failed")).encode(), "not finished"),
    (json.dumps(response(EDITION, status="queued")).encode(), "not finished"),
    (b"x" * 101, "max_output_bytes (100)"),
])
def test_refusals(raw: bytes, needle: str) -> None:
    with pytest.raises(OperatorRefused, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse(raw, 100)


def test_custody_is_exactly_a_polls() -> None:
    # A lone surrogate (possible only through a JSON escape) is stored escaped, as on_output does.
    text = EDITION + "\ud800"
    imported = parse(json.dumps({"output_text": text}).encode(), 10_000)
    j = job()
    d = remedies.import_payload(j, imported, 10_000, "alice", "from the dashboard")
    poll = decisions.on_output(j, Observed("", "completed", text, None, stage=Stage.FINISHED), 10_000)
    assert d.to == State.RETRIEVED_NOT_VALIDATED and d.reason == Reason.OPERATOR_IMPORT_PAYLOAD and d.delay == 0
    assert d.changes == {**poll.changes, "quarantine_reason": None}
    assert d.changes["payload"].endswith("\\ud800")
    assert d.detail["sha256_as_received"] == poll.detail["sha256_as_received"] and d.detail["escaped_unencodable"]
    assert (d.detail["by"], d.detail["why"], d.detail["source"]) == ("alice", "from the dashboard", "output_text")
    assert d.detail["file_sha256"] == hashlib.sha256(json.dumps({"output_text": text}).encode()).hexdigest()


def test_tokens_are_counted_and_another_jobs_response_is_refused() -> None:
    imported = parse(json.dumps(response(EDITION)).encode(), 10_000)
    d = remedies.import_payload(job(total_tokens=100), imported, 10_000, "a", "b")
    assert d.changes["total_tokens"] == 108 and d.detail["file_response_id"] == "resp_1"
    with pytest.raises(OperatorRefused, match="names job job-1, not job job-2"):
        remedies.import_payload(job(id="job-2"), imported, 10_000, "a", "b")


@pytest.mark.parametrize("state", [State.QUARANTINED, State.COMPLETED_NOT_RETRIEVED,
                                   State.PROVIDER_EXPIRED_OR_MISSING])
def test_importable_states_have_the_edge(state: State) -> None:
    from iipub.model import states

    assert states.allowed(state, State.RETRIEVED_NOT_VALIDATED, operator=True)
    remedies.check_import(job(state))


@pytest.mark.parametrize("state", [s for s in State if s not in states.IMPORTABLE])
def test_every_other_state_is_refused(state: State) -> None:
    with pytest.raises(OperatorRefused, match="import-payload applies only to"):
        remedies.check_import(job(state))


def test_a_payload_in_custody_is_refused() -> None:
    with pytest.raises(OperatorRefused, match="already holds a payload"):
        remedies.check_import(job(payload="{}", payload_sha256="ab"))


def test_a_dashboard_response_with_phases_imports_its_final_answer_only() -> None:
    """As custody reads it: the commentary message and reasoning items are not the edition."""
    doc = {"id": "resp_1", "object": "response", "status": "completed", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "phase": "commentary",
         "content": [{"type": "output_text", "text": "Drafting."}]},
        {"type": "message", "role": "assistant", "phase": "final_answer",
         "content": [{"type": "output_text", "text": '{"en"'}, {"type": "output_text", "text": ": 1}"}]},
    ]}
    imported = parse(json.dumps(doc).encode(), 10_000)
    assert imported.text == '{"en": 1}' and imported.source == "response"
