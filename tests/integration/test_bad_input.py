"""Bad input from the provider, at the reconcile level over real HTTP, against the real database.

What is already covered elsewhere (and not repeated here):
  - simulator content faults one by one (schema_break, malformed_output, hallucinated_urls
    incl. localhost / private IPs, same_text, script_injection incl. `<script>` and
    `javascript:`, oversized_output, incomplete): tests/integration/machine/test_sweep.py
    (test_08_28_36_44_45_..., test_incomplete_response_is_retrieved_and_validation_decides);
  - every validation rule on a payload text (control characters, lone surrogates, URLs,
    sizes): tests/unit/edition/test_validate.py; HTML escaping and link dropping:
    tests/integration/publish/sinks/test_static.py and tests/acceptance/test_static_xss_chromium.py;
  - the adapter's mapping of unparsable / 5xx / HTML create answers: tests/unit/provider/openai/test_adapter.py.

Here: payloads no simulator fault produces (invalid UTF-8 bytes, a JSON-escaped lone surrogate,
a body cut short, JSON cut short, HTML instead of JSON, control characters, a body larger than
the database accepts in one statement) from a tiny Responses server on 127.0.0.1, and every
simulator content fault at once next to an already published slot. Each case ends parked with
a reason (or publishes nothing), never pays twice, and leaves every row and file that was
already stored exactly as it was.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from iipub.machine import sweep
from iipub.observe import invariants
from iipub.provider.openai.simulator import Simulator, content
from iipub.publish import relay
from iipub.settings.config import Settings
from iipub.store import clock, tables
from iipub.store.job_store import Store
from tests.support.suite import fast_first

PRODUCT = "daily-brief"
GOOD_DAY = dt.date(2026, 11, 27)
BAD_DAY = dt.date(2026, 11, 28)
POLL_BUDGET = 3

pytestmark = pytest.mark.no_auto_schedule

# Terminal escapes (colour, clear screen, a window-title OSC ended by BEL), a NUL, a carriage
# return that would overwrite the line, a right-to-left override.
HOSTILE_TEXT = "Unsupported value.\x1b[31mRED\x1b[2J\x1b]0;pwned\x07\rFAKE: all published\x00\u202e"


# -- just enough of the Responses API -------------------------------------------------------------


@dataclass
class Stored:
    job_id: str | None
    request: dict[str, Any]


class FakeResponses:
    """POST /v1/responses answers `queued`; GET answers `completed` with output generated for the
    request's schema (the simulator's own generator), unless the job was given a bad mode."""

    def __init__(self) -> None:
        self.responses: dict[str, Stored] = {}
        self.get_mode: dict[str, str] = {}  # job id -> how its GETs misbehave
        self.create_mode: dict[str, str] = {}  # job id -> how its create answer misbehaves
        self.requests: Counter[tuple[str, str | None]] = Counter()  # (op, job id)
        self.forget_after: int | None = None  # GETs of one response before it answers 404 (retention)
        self.gets: Counter[str] = Counter()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                fake.on_create(self, json.loads(body))

            def do_GET(self) -> None:
                fake.on_get(self, self.path.rsplit("/", 1)[-1])

            def do_DELETE(self) -> None:
                rid = self.path.rsplit("/", 1)[-1]
                with fake.lock:
                    fake.requests[("delete", fake.responses[rid].job_id if rid in fake.responses else None)] += 1
                send(self, 200, json.dumps({"id": rid, "object": "response", "deleted": True}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def count(self, op: str, job_id: str) -> int:
        with self.lock:
            return self.requests[(op, job_id)]

    def on_create(self, h: BaseHTTPRequestHandler, req: dict[str, Any]) -> None:
        job_id = (req.get("metadata") or {}).get("iipub_job_id")
        if self.create_mode.get(job_id or "") == "param_refusal_control_chars":
            with self.lock:
                self.requests[("refused", job_id)] += 1
            error = {"message": HOSTILE_TEXT, "type": "invalid_request_error", "param": "temperature" + HOSTILE_TEXT,
                     "code": "unsupported_value"}
            send(h, 400, json.dumps({"error": error}).encode())
            return
        rid = "resp_" + secrets.token_hex(16)
        with self.lock:
            self.requests[("create", job_id)] += 1
            self.responses[rid] = Stored(job_id, req)  # created (and billed) whatever the client hears
        mode = self.create_mode.get(job_id or "")
        doc = self.render(rid, "queued", None)
        raw = json.dumps(doc).encode()
        if mode == "invalid_utf8":
            send(h, 200, raw.replace(b'"queued"', b'"queu\xff\xfe"'))
        elif mode == "no_id":
            doc.pop("id")
            send(h, 200, json.dumps(doc).encode())
        elif mode == "truncated_body":
            send(h, 200, raw, cut=True)
        else:
            send(h, 200, raw)

    def on_get(self, h: BaseHTTPRequestHandler, rid: str) -> None:
        with self.lock:
            stored = self.responses.get(rid)
            self.requests[("retrieve", stored.job_id if stored else None)] += 1
            self.gets[rid] += 1
            if self.forget_after is not None and self.gets[rid] > self.forget_after:
                stored = None  # the provider's retention ran out
        if stored is None:
            send(h, 404, json.dumps({"error": {"message": "not found", "type": "invalid_request_error",
                                               "param": None, "code": None}}).encode())
            return
        mode = self.get_mode.get(stored.job_id or "")
        text = self.good_text(stored)
        if mode == "control_chars":
            doc = json.loads(text)
            doc["en"]["items"][0]["headline"] += " \x00\x1b[31m"
            doc["es"]["title"] = "\u202e" + doc["es"]["title"]
            text = json.dumps(doc, ensure_ascii=False)
        elif mode == "lone_surrogate":
            text = text.replace("Reuters", "Reu\ud800ters", 1)  # json.dumps writes it as "\ud800"
        elif mode == "huge":
            doc = json.loads(text)
            doc["en"]["summary"] = "x" * (17 * 1024 * 1024)  # beyond MariaDB's default 16 MB packet
            text = json.dumps(doc)
        raw = json.dumps(self.render(rid, "completed", text)).encode()
        if mode == "invalid_utf8":
            raw = raw.replace(b"Reuters", b"Reu\xff\xfe\xc3ters", 1)
        if mode == "truncated_json":
            send(h, 200, raw[: len(raw) // 2])
        elif mode == "truncated_body":
            send(h, 200, raw, cut=True)
        elif mode == "html":
            send(h, 200, b"<html><body>Service temporarily unavailable</body></html>", ctype="text/html")
        else:
            send(h, 200, raw)

    def good_text(self, stored: Stored) -> str:
        fmt = (stored.request.get("text") or {}).get("format") or {}
        return content.generate(fmt.get("schema"), model=str(stored.request.get("model")),
                                slot=(stored.request.get("metadata") or {}).get("iipub_slot"), seed=1,
                                faults=frozenset())

    def render(self, rid: str, status: str, text: str | None) -> dict[str, Any]:
        req = self.responses[rid].request
        output = [] if text is None else [{
            "type": "message", "id": "msg_" + rid[5:], "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }]
        usage = None if text is None else {
            "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": len(text) // 4,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10 + len(text) // 4,
        }
        return {
            "id": rid, "object": "response", "created_at": 1764000000, "status": status, "background": True,
            "error": None, "incomplete_details": None, "instructions": req.get("instructions"),
            "model": req.get("model"), "output": output, "parallel_tool_calls": True, "temperature": 0.2,
            "text": req.get("text"), "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
            "usage": usage, "metadata": req.get("metadata") or {},
        }


def send(h: BaseHTTPRequestHandler, status: int, body: bytes, *, ctype: str = "application/json",
         cut: bool = False) -> None:
    try:
        h.send_response(status)
        h.send_header("content-type", ctype)
        h.send_header("content-length", str(len(body)))
        if cut:
            h.send_header("connection", "close")
        h.end_headers()
        h.wfile.write(body[: len(body) // 2] if cut else body)
        if cut:
            h.close_connection = True  # the body ends early: a truncated transfer
    except OSError:
        pass


@pytest.fixture
def fake() -> Iterator[FakeResponses]:
    f = FakeResponses()
    f.thread.start()
    try:
        yield f
    finally:
        f.server.shutdown()
        f.server.server_close()


def one_product(settings: Settings, base_url: str) -> Settings:
    p = replace(settings.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    return replace(settings, products={PRODUCT: p}, budgets=replace(settings.budgets, max_poll_attempts=POLL_BUDGET),
                   provider=replace(settings.provider, kind="openai", base_url=base_url))


# -- what was stored before must be exactly what is stored after --------------------------------------------


def job_row(engine: sa.Engine, job_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(tables.jobs).where(tables.jobs.c.id == job_id)).mappings().one())


def snapshot(engine: sa.Engine, job_id: str, root: Path) -> dict[str, Any]:
    """Every row of one job (job, journal, editions, outbox, deliveries) and the static site."""
    with engine.connect() as conn:
        events = [dict(r) for r in conn.execute(sa.select(tables.job_events).where(tables.job_events.c.job_id == job_id)
                                                .order_by(tables.job_events.c.id)).mappings()]
        editions = [dict(r) for r in conn.execute(sa.select(tables.editions).where(tables.editions.c.job_id == job_id)
                                                  .order_by(tables.editions.c.id)).mappings()]
        outbox = [dict(r) for r in conn.execute(sa.select(tables.outbox).where(tables.outbox.c.job_id == job_id)
                                                .order_by(tables.outbox.c.id)).mappings()]
        ids = [o["event_id"] for o in outbox]
        deliveries = [dict(r) for r in conn.execute(sa.select(tables.outbox_deliveries)
                                                    .where(tables.outbox_deliveries.c.event_id.in_(ids))
                                                    .order_by(tables.outbox_deliveries.c.id)).mappings()]
    files = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}
    return {"job": job_row(engine, job_id), "events": events, "editions": editions, "outbox": outbox,
            "deliveries": deliveries, "files": files}


def publish_neighbour(s: Settings, engine: sa.Engine, advance: Any = None) -> tuple[str, dict[str, Any]]:
    """A slot published end to end before the bad input arrives; returns its id and snapshot."""
    store = Store(engine, "test")
    store.schedule(s.products[PRODUCT], GOOD_DAY)
    (job_id,) = [j.id for j in store.list_jobs(day=GOOD_DAY)]
    for _ in range(8):
        sweep.run(s, engine)
        relay.run(s, engine)
        if advance is not None:
            advance()
        if job_row(engine, job_id)["state"] == "DELETED":
            break
    assert job_row(engine, job_id)["state"] == "DELETED"
    assert s.static_sink is not None
    return job_id, snapshot(engine, job_id, Path(s.static_sink.root))


def bad_slot(s: Settings, engine: sa.Engine) -> str:
    store = Store(engine, "test")
    store.schedule(s.products[PRODUCT], BAD_DAY)
    return store.list_jobs(day=BAD_DAY)[0].id


def ticks(s: Settings, engine: sa.Engine, n: int = 6) -> None:
    for _ in range(n):
        sweep.run(s, engine)
        relay.run(s, engine)
        clock.advance_clock(engine, 700)  # past every backoff and lease


@contextmanager
def bad_answer_beside_published_work(settings: Settings, engine: sa.Engine, fake: FakeResponses, *,
                                     get_mode: str = "", create_mode: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """A slot published end to end, then a slot whose provider answers are bad (`get_mode` for
    its retrieves, `create_mode` for its create) ticked until it rests; yields the bad slot's id
    and row. After the block: the published slot's rows and pages are as they were, and the
    invariants hold."""
    s = one_product(settings, fake.url)
    good, before = publish_neighbour(s, engine)
    job_id = bad_slot(s, engine)
    if get_mode:
        fake.get_mode[job_id] = get_mode
    if create_mode:
        fake.create_mode[job_id] = create_mode
    ticks(s, engine)
    yield job_id, job_row(engine, job_id)
    assert snapshot(engine, good, Path(s.static_sink.root)) == before  # type: ignore[union-attr]
    assert invariants.check(engine, settings=s, settled=True) == []


# -- payloads that cannot be read are polled to the budget, then parked with the response id ---------------------


@pytest.mark.parametrize("mode", fast_first(["invalid_utf8", "truncated_body", "truncated_json", "html"]))
def test_unreadable_completed_response_is_parked_with_its_response_id(
    settings: Settings, engine: sa.Engine, fake: FakeResponses, mode: str
) -> None:
    with bad_answer_beside_published_work(settings, engine, fake, get_mode=mode) as (job_id, row):
        assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "poll_budget_exhausted"
        assert row["response_id"] and row["payload"] is None and row["generation_attempts"] == 1
        # The polls the budget allows, then the custody watch's reads of the parked response (unreadable:
        # nothing stored, nothing decided).
        assert fake.count("create", job_id) == 1 and fake.count("retrieve", job_id) >= POLL_BUDGET
        assert row["poll_count"] == POLL_BUDGET


@pytest.mark.parametrize("mode", fast_first(["no_id", "invalid_utf8", "truncated_body"]))
@pytest.mark.slow
def test_unreadable_create_answer_is_an_unknown_outcome_never_retried(
    settings: Settings, engine: sa.Engine, fake: FakeResponses, mode: str
) -> None:
    with bad_answer_beside_published_work(settings, engine, fake, create_mode=mode) as (job_id, row):
        assert row["state"] == "QUARANTINED" and row["quarantine_reason"] == "create_outcome_unknown"
        assert row["response_id"] is None and row["generation_attempts"] == 1
        assert fake.count("create", job_id) == 1  # the provider did create it: never a second POST


def test_control_characters_are_retained_not_published(settings: Settings, engine: sa.Engine,
                                                        fake: FakeResponses) -> None:
    with bad_answer_beside_published_work(settings, engine, fake, get_mode="control_chars") as (job_id, row):
        assert row["state"] == "VALIDATION_FAILED_RETAINED"
        assert "\\u0000\\u001b[31m" in row["payload"] and "\u202e" in row["payload"]  # stored as received
        assert row["payload_sha256"] == hashlib.sha256(row["payload"].encode()).hexdigest()
        assert "control_chars: en.items[0].headline (U+0000)" in row["last_error"]
        assert "control_chars: es.title (U+202E)" in row["last_error"]
        assert fake.count("create", job_id) == 1


def paid_once_before_the_provider_forgets(settings: Settings, engine: sa.Engine, fake: FakeResponses,
                                          get_mode: str) -> tuple[str, dict[str, Any]]:
    """A slot whose output is `get_mode`, from a provider that forgets a response after three
    reads, ticked six times: created once. Returns its id and row."""
    s = one_product(settings, fake.url)
    job_id = bad_slot(s, engine)
    fake.get_mode[job_id] = get_mode
    fake.forget_after = 3
    ticks(s, engine, n=6)
    assert fake.count("create", job_id) == 1
    return job_id, job_row(engine, job_id)


def test_lone_surrogate_in_the_output_is_retained_and_paid_once(settings: Settings, engine: sa.Engine,
                                                                 fake: FakeResponses) -> None:
    job_id, row = paid_once_before_the_provider_forgets(settings, engine, fake, "lone_surrogate")
    assert fake.count("retrieve", job_id) <= 2
    assert row["state"] == "VALIDATION_FAILED_RETAINED" and row["payload"]


@pytest.mark.slow
def test_output_beyond_what_the_database_takes_is_parked_and_paid_once(settings: Settings, engine: sa.Engine,
                                                                       fake: FakeResponses) -> None:
    _, row = paid_once_before_the_provider_forgets(settings, engine, fake, "huge")
    assert row["state"] == "VALIDATION_FAILED_RETAINED" and "too_large" in (row["last_error"] or "")


# -- every simulator content fault at once, next to a published slot ----------------------------------------------

CONTENT = ["malformed_output", "oversized_output", "schema_break", "incomplete", "script_injection",
           "hallucinated_urls", "same_text", "fail"]


@pytest.mark.slow
def test_every_content_fault_at_once_leaves_published_work_untouched(settings: Settings, engine: sa.Engine,
                                                                      sim: Simulator) -> None:
    p = replace(settings.products[PRODUCT], items=3, prompt="Write the brief.", opens_at=dt.time(0, 0))
    s = replace(settings, products={PRODUCT: p})
    assert s.static_sink is not None
    root = Path(s.static_sink.root)
    good, before = publish_neighbour(s, engine, advance=lambda: sim.advance(5))
    store = Store(engine, "test")
    bad = {}
    for i, fault in enumerate(CONTENT):
        day = BAD_DAY - dt.timedelta(days=10 + i)
        store.schedule(p, day)
        bad[fault] = store.list_jobs(day=day)[0].id
        sim.add_faults([{"op": "create", "fault": fault, "job_id": bad[fault]}])
    for _ in range(8):
        sweep.run(s, engine)
        relay.run(s, engine)
        sim.advance(5)
    rows = {f: job_row(engine, j) for f, j in bad.items()}
    for fault, row in rows.items():
        if fault == "fail":  # no output to keep: journaled as lost, then generated again (and fine)
            assert row["state"] == "DELETED" and row["generation_attempts"] == 2, row
            continue
        if fault == "incomplete":  # cut at max_output_tokens: kept, parked before validation
            assert (row["state"], row["quarantine_reason"]) == ("QUARANTINED", "output_cap_reached"), row
        else:
            assert row["state"] == "VALIDATION_FAILED_RETAINED", (fault, row["state"], row["last_error"])
        assert row["payload"] and row["payload_sha256"] == hashlib.sha256(row["payload"].encode()).hexdigest()
        assert row["generation_attempts"] == 1
    stats = sim.stats()
    assert {j: stats["creates_by_job"][j] for j in bad.values()} == {
        j: (2 if f == "fail" else 1) for f, j in bad.items()}
    after = snapshot(engine, good, root)
    # The neighbour's rows and edition files are untouched; the index and feed grew by exactly
    # one edition: the `fail` slot's, generated again and published.
    assert {k: v for k, v in after.items() if k != "files"} == {k: v for k, v in before.items() if k != "files"}
    regenerated = (BAD_DAY - dt.timedelta(days=10 + CONTENT.index("fail"))).isoformat()
    # Its editions (the JSON) are byte-identical; its pages changed only by gaining a link to
    # the new neighbouring edition (the site's previous/next navigation).
    mine = {k: v for k, v in before["files"].items() if f"/{GOOD_DAY.isoformat()}/" in f"/{k}" and k.endswith(".json")}
    assert mine and {k: after["files"][k] for k in mine} == mine
    days = {k.split("/")[1] for k in after["files"] if k.count("/") == 2 and k.split("/")[1][:2] == "20"}
    assert days == {GOOD_DAY.isoformat(), regenerated}
    with engine.connect() as conn:
        dates = conn.execute(sa.select(tables.editions.c.edition_date).distinct()).scalars().all()
    assert sorted(d.isoformat() for d in dates) == sorted([GOOD_DAY.isoformat(), regenerated])
    assert invariants.check(engine, settings=s, sim_stats=stats, settled=True) == []


def test_a_refusal_message_with_terminal_escapes_is_stored_printable(settings: Settings, engine: sa.Engine,
                                                                      fake: FakeResponses) -> None:
    """A provider's error text reaches `status --check`, `status` and `jobs show` on an operator's
    terminal: what is stored of it (the hold, the job's last error, the journal) holds no
    control character, and the refused create is not retried while the product is held."""
    s = one_product(settings, fake.url)
    job_id = bad_slot(s, engine)
    fake.create_mode[job_id] = "param_refusal_control_chars"
    sweep.run(s, engine)
    sweep.run(s, engine)
    assert fake.count("refused", job_id) == 1 and fake.count("create", job_id) == 0
    with engine.connect() as conn:
        hold = conn.execute(sa.select(tables.product_holds)).mappings().one()
        details = list(conn.execute(sa.select(tables.job_events.c.detail)
                                    .where(tables.job_events.c.job_id == job_id)).scalars())
    stored = [hold["message"], hold["param"], job_row(engine, job_id)["last_error"],
              *(str(json.loads(d)) for d in details if d)]
    assert "RED" in hold["message"] and "FAKE: all published" in hold["message"]
    for text in stored:
        assert all(ch.isprintable() for ch in text), repr(text)
