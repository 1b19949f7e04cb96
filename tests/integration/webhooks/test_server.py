"""The receiver as it faces the open internet (`iipub webhook serve`: waitress with the limits in
`[webhooks]`), tried as an attacker would: slow clients, floods of connections, bursts, malformed
requests; and what an operator needs: the request budget held while the provider is slow,
unknown event types counted, rejections that can be matched with the provider's log, any path
behind a proxy, a warm start, retention, and a signed test delivery."""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from iipub.provider.openai.simulator import Simulator
from iipub.settings.config import Settings, WebhookSettings
from iipub.store import clock, db, tables
from iipub.store.deliveries import Deliveries
from iipub.webhooks import receiver as webhook
from iipub.webhooks import server as webhook_server
from iipub.webhooks.server import Server
from tests.integration.webhooks.test_receiver import SECRET, event, signed
from tests.support.cli import run_cli
from tests.support.rows import row_count
from tests.support.suite import bench_module

HOOKS = WebhookSettings(enabled=True, poll_interval_seconds=300, lease_wait_seconds=0.3, request_seconds=10,
                        read_seconds=2, keepalive_seconds=5)


@pytest.fixture
def hooked(cfg: Settings) -> Settings:
    return replace(cfg, provider_webhook_secret=SECRET, reconcile=replace(cfg.reconcile, poll_interval_seconds=250),
                   webhooks=HOOKS)


@contextlib.contextmanager
def served(settings: Settings, engine: sa.Engine) -> Iterator[tuple[webhook.Receiver, Server]]:
    receiver = webhook.Receiver(settings, engine=engine)
    try:
        with webhook_server.running(receiver, settings.webhooks) as server:
            yield receiver, server
    finally:
        receiver.close()


@pytest.fixture
def server(hooked: Settings, engine: sa.Engine) -> Iterator[Server]:
    with served(hooked, engine) as (_, srv):
        yield srv


def url_of(srv: Server, path: str = "/") -> str:
    return f"http://127.0.0.1:{srv.port}{path}"


def raw(srv: Server, request: bytes, timeout: float = 10) -> bytes:
    """Send `request` as is on a fresh connection; everything the server answers before closing."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=timeout) as s:
        s.sendall(request)
        return _read_all(s)


def _read_all(s: socket.socket) -> bytes:
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return got
        if not chunk:
            return got
        got += chunk


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def deliveries(engine: sa.Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(tables.webhook_deliveries)).mappings()]


def signed_request(body: bytes, headers: dict[str, str], path: str = "/") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# -- the whole-request deadline and the limits --------------------------------------------------


@pytest.mark.slow
def test_a_slow_loris_is_answered_408_and_closed_at_the_deadline(server: Server, engine: sa.Engine) -> None:
    """One byte a second never resets a per-read timeout; the whole request must still arrive
    within [webhooks] read_seconds (2 s here), or 408 and the connection is closed."""
    body = event("resp_slow")
    request = signed_request(body, signed(body))
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(request[:60])
        answer = b""
        for byte in request[60:]:
            time.sleep(0.5)
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if time.monotonic() - started > 8:
                break
        s.settimeout(5)
        answer = _read_all(s)
    held = time.monotonic() - started
    assert status_of(answer) == 408, answer[:200]
    assert b"Connection: close" in answer
    assert held < 2 + 1 + 1.5, held  # the deadline, the maintenance pass's second, slack
    assert deliveries(engine) == []


@pytest.mark.slow
def test_a_client_that_connects_and_says_nothing_is_closed_at_the_deadline(server: Server) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        answer = _read_all(s)
    assert status_of(answer) == 408
    assert time.monotonic() - started < 4.5


@pytest.mark.slow
def test_300_connections_do_not_make_300_threads(hooked: Settings, engine: sa.Engine) -> None:
    settings = replace(hooked, webhooks=replace(hooked.webhooks, threads=4, read_seconds=30))
    before = threading.active_count()
    with served(settings, engine) as (_, srv):
        started = threading.active_count()
        socks = []
        try:
            for _ in range(300):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")  # and then nothing
                socks.append(s)
            time.sleep(1.0)
            peak = threading.active_count()
            # The server still answers while 300 clients hold connections.
            answer = httpx.get(url_of(srv), timeout=10)
        finally:
            for s in socks:
                s.close()
    assert started - before <= settings.webhooks.threads + 2  # the pool and the event loop
    assert peak == started, (before, started, peak)
    assert answer.status_code == 405 and answer.headers["server"] == "iipub"


@pytest.mark.slow
def test_a_burst_beyond_the_connection_limit_waits_in_the_backlog_without_resets(
        hooked: Settings, engine: sa.Engine) -> None:
    """The stdlib server listened with a backlog of 5: a burst of 20-40 got resets. 120 at once
    against a limit of 16 open connections: the rest wait in the backlog and are all answered."""
    settings = replace(hooked, webhooks=replace(hooked.webhooks, connection_limit=16, threads=4))
    results: list[int | str] = []
    lock = threading.Lock()
    with served(settings, engine) as (_, srv):
        start = threading.Barrier(120)

        def one(i: int) -> None:
            body = json.dumps({"id": f"evt_{i}", "object": "event", "type": "batch.completed", "created_at": 1,
                               "data": {"id": f"batch_{i}"}}).encode()
            headers = signed(body, webhook_id=f"wh_burst_{i}")
            start.wait()
            try:
                got: int | str = httpx.post(url_of(srv), content=body, headers=headers, timeout=30).status_code
            except httpx.HTTPError as exc:
                got = f"{type(exc).__name__}: {exc}"
            with lock:
                results.append(got)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(120)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert sorted(results, key=str) == [200] * 120, [r for r in results if r != 200][:5]
    assert row_count(engine, tables.webhook_deliveries) == 120


# -- malformed requests: 400, never a 500 or a traceback ----------------------------------------


@pytest.mark.parametrize("request_bytes", [
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
    b"POST /\xff\xfe HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    b"P\xd3ST / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nBad Header Name: 1\r\nContent-Length: 0\r\n\r\n",
    (b"POST / HTTP/1.1\r\nHost: x\r\nwebhook-id: wh_\xe9\xe9\r\nwebhook-timestamp: 1\r\nwebhook-signature: v1,AA==\r\n"
     b"Content-Length: 2\r\n\r\n{}"),
    b"POST / HTTP/1.1\r\nHost: x\r\nUser-Agent: caf\xe9\r\nContent-Length: 0\r\n\r\n",
], ids=["superscript-length", "negative-length", "float-length", "two-lengths", "non-ascii-path",
        "non-ascii-method", "bad-header", "non-ascii-webhook-id", "non-ascii-header"])
def test_a_malformed_request_is_400_without_a_traceback(
        server: Server, engine: sa.Engine, capfd: pytest.CaptureFixture[str], request_bytes: bytes) -> None:
    answer = raw(server, request_bytes)
    assert status_of(answer) == 400, answer[:300]
    assert b"Traceback" not in answer
    assert b"Server: iipub\r\n" in answer
    err = capfd.readouterr().err
    assert "Traceback" not in err and "webhook_failed" not in err
    assert deliveries(engine) == []


def test_an_absurd_content_length_is_413_before_any_byte_of_body(server: Server, engine: sa.Engine) -> None:
    answer = raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n")
    assert status_of(answer) == 413
    assert deliveries(engine) == []


def test_duplicate_signature_headers_are_400(server: Server, engine: sa.Engine, sim: Simulator) -> None:
    """A second webhook-signature header is joined to the first by the server ("a, b"); the SDK
    would find the valid one among the pieces. Refused before verification."""
    body = event("resp_dup")
    good = signed(body)
    for name in ("webhook-signature", "webhook-id", "webhook-timestamp"):
        lines = ["POST / HTTP/1.1", "Host: x", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in good.items()]
        lines.append(f"{name}: {'v1,AAAA' if name == 'webhook-signature' else good[name]}")
        answer = raw(server, ("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        assert status_of(answer) == 400, (name, answer[:300])
        assert b"duplicate" in answer
    assert deliveries(engine) == [] and sim.stats()["requests"]["retrieve"] == 0


def test_the_application_itself_refuses_a_bad_content_length_under_any_server(receiver_app: webhook.Receiver) -> None:
    """gunicorn and mod_wsgi hand the header through: the app checks it (ASCII digits only)."""
    for raw_length, status in (("\xb2", 400), ("-1", 400), (" 12 ", 400), ("", 411), ("9" * 30, 413)):
        seen: list[str] = []
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": raw_length,
                   "REMOTE_ADDR": "192.0.2.7", "wsgi.input": _Input(b"{}")}
        out = b"".join(receiver_app(environ, lambda s, h, seen=seen: seen.append(s)))
        assert seen and int(seen[0].split()[0]) == status, (raw_length, seen, out)


class _Input:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int = -1) -> bytes:
        chunk, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
        return chunk


@pytest.fixture
def receiver_app(hooked: Settings, engine: sa.Engine) -> Iterator[webhook.Receiver]:
    r = webhook.Receiver(replace(hooked, webhooks=replace(hooked.webhooks, trusted_proxies=("127.0.0.1",))),
                         engine=engine)
    yield r
    r.close()


# -- the request budget, provider reads included -----------------------------------------------


@pytest.mark.slow
def test_the_budget_holds_while_an_unknown_response_is_read_slowly(hooked: Settings, engine: sa.Engine,
                                                                    sim: Simulator) -> None:
    """The provider answers a read only after 35 s (the simulator's `slow` fault on GET); the
    read timeout is 30 s. The delivery must still be answered within its 3 s budget: 503, so the
    provider delivers it again, and nothing recorded."""
    settings = replace(hooked, webhooks=replace(hooked.webhooks, request_seconds=3),
                       provider=replace(hooked.provider, timeout_seconds=30))
    client = openai.OpenAI(api_key="sk-test", base_url=sim.url, max_retries=0)
    resp = client.responses.create(model="gpt-test", input="hi", background=True, metadata={"x": "y"})
    sim.advance(5)
    # Kept as an orphan already (say, announced before): a response the receiver reads again.
    Deliveries(engine).record_orphan(None, resp.id, "announced before", "in_progress", 1000)
    sim.add_faults([{"fault": "slow", "op": "retrieve"}])
    body = event(resp.id)
    with served(settings, engine) as (_, srv):
        started = time.monotonic()
        answer = httpx.post(url_of(srv), content=body, headers=signed(body), timeout=40)
        took = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert took < 3 + 2.5, took  # the budget, then forgetting the row; far from the 30 s read timeout
    assert sim.stats()["requests"]["retrieve"] == 1
    assert deliveries(engine) == []  # forgotten: the redelivery is settled afresh
    assert [o["status"] for o in Deliveries(engine).orphans()] == ["in_progress"]


def test_a_delivery_that_waited_past_its_budget_for_a_thread_is_503_at_once(
        receiver_app: webhook.Receiver, engine: sa.Engine) -> None:
    body = event("resp_late")
    answer = receiver_app.receive(body, signed(body), received_at=time.monotonic() - 11)
    assert answer.status == 503
    assert deliveries(engine) == []


# -- unknown event types, the Server header, rejected deliveries in the log ----------------------


def test_an_unknown_event_type_is_200_and_counted(server: Server, engine: sa.Engine, sim: Simulator,
                                                  cli_env: dict[str, str], tmp_path: Path) -> None:
    body = json.dumps({"id": "evt_new", "object": "event", "type": "response.exploded", "created_at": 1,
                       "data": {"id": "resp_1"}}).encode()
    answer = httpx.post(url_of(server), content=body, headers=signed(body, webhook_id="wh_unknown"), timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["server"] == "iipub"
    (row,) = deliveries(engine)
    assert row["outcome"] == "unknown_event" and row["event_type"] == "response.exploded"
    assert sim.stats()["requests"]["retrieve"] == 0
    again = httpx.post(url_of(server), content=body, headers=signed(body, webhook_id="wh_unknown"), timeout=10)
    assert again.status_code == 200 and "duplicate" in again.text
    prom = tmp_path / "iipub.prom"
    shown = run_cli("status", "--json", "--prometheus", str(prom), env=cli_env)
    doc = json.loads(shown.stdout)["webhooks"]
    assert doc["unknown_events"] == 1 and doc["outcomes"]["unknown_event"] == 1
    metrics = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(prom.read_text()) for s in family.samples}
    assert metrics[("iipub_webhook_deliveries", (("outcome", "unknown_event"),))] == 1
    assert "unknown_event 1" in run_cli("status", env=cli_env).stdout


def test_no_version_in_the_server_header(server: Server) -> None:
    for answer in (httpx.get(url_of(server), timeout=10),
                   httpx.post(url_of(server), content=b"{}", headers={"content-length": "2"}, timeout=10)):
        assert answer.headers["server"] == "iipub"
        assert not any(ch.isdigit() for ch in answer.headers["server"])
        assert "python" not in str(answer.headers).lower() and "waitress" not in str(answer.headers).lower()
    assert b"Server: iipub\r\n" in raw(server, b"GARBAGE\r\n\r\n")


def test_a_rejected_delivery_is_logged_with_its_webhook_id_client_and_reason(receiver_app: webhook.Receiver) -> None:
    body = event("resp_x")
    headers = signed(body, webhook_id="wh_forged_1", secret="whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=")
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": str(len(body)),
               "REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9, 198.51.100.4",
               "wsgi.input": _Input(body), **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}}
    with capture_logs() as logs:
        list(receiver_app(environ, lambda s, h: None))
        # Not from a trusted proxy: its X-Forwarded-For is not believed.
        list(receiver_app(environ | {"REMOTE_ADDR": "192.0.2.50", "wsgi.input": _Input(body)}, lambda s, h: None))
    rejected = [e for e in logs if e["event"] == "webhook_rejected"]
    assert len(rejected) == 2
    first, second = rejected
    assert first["webhook_id"] == "wh_forged_1" and first["status"] == 400
    assert first["client"] == "127.0.0.1" and first["forwarded_for"] == "198.51.100.4"
    assert "not verified" in first["reason"]
    assert second["client"] == "192.0.2.50" and second["forwarded_for"] is None


@pytest.mark.slow
def test_a_timed_out_request_is_logged_with_its_client(server: Server) -> None:
    with capture_logs() as logs, socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nwebhook-id: wh_slow_9\r\nContent-Length: 100\r\n\r\n{")
        answer = _read_all(s)
    assert status_of(answer) == 408
    (line,) = [e for e in logs if e["event"] == "webhook_rejected"]
    assert line["status"] == 408 and line["webhook_id"] == "wh_slow_9" and line["client"] == "127.0.0.1"


# -- behind a proxy: any path, SCRIPT_NAME ---------------------------------------------------------


def test_a_delivery_at_the_proxys_own_path_is_settled(server: Server, engine: sa.Engine,
                                                      receiver_app: webhook.Receiver) -> None:
    """nginx `proxy_pass http://127.0.0.1:8091;` keeps the public path (/hooks/openai); mod_wsgi
    mounts the app under a SCRIPT_NAME. Both reach the receiver."""
    body = json.dumps({"id": "evt_p", "object": "event", "type": "batch.completed", "created_at": 1,
                       "data": {"id": "batch_p"}}).encode()
    answer = httpx.post(url_of(server, "/hooks/openai"), content=body, headers=signed(body, webhook_id="wh_path"),
                        timeout=10)
    assert answer.status_code == 200, answer.text
    environ = {"REQUEST_METHOD": "POST", "SCRIPT_NAME": "/hooks/openai", "PATH_INFO": "",
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1", "wsgi.input": _Input(body),
               **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in signed(body, webhook_id="wh_mount").items()}}
    seen: list[str] = []
    list(receiver_app(environ, lambda s, h: seen.append(s)))
    assert seen == ["200 OK"]
    assert sorted(r["webhook_id"] for r in deliveries(engine)) == ["wh_mount", "wh_path"]


# -- warm start ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_preload_builds_the_receiver_at_import_and_a_forked_worker_answers(
        engine: sa.Engine, cli_env: dict[str, str], tmp_path: Path) -> None:
    """IIPUB_WEBHOOK_PRELOAD=1 (gunicorn --preload): the engine, the provider's client and the
    custody path are ready when the module is imported, no connection stays open, and a process
    forked after that answers a delivery (here the test delivery, which reads the database)."""
    script = tmp_path / "fork.py"
    script.write_text(
        "import os, sys, json\n"
        "import iipub.webhooks.receiver as w\n"
        "r = w._receiver\n"
        "assert r is not None, 'not preloaded'\n"
        "assert r.provider._shards, 'provider pool not built'\n"
        "assert 'iipub.machine.steps' in sys.modules and 'iipub.edition.validate' in sys.modules\n"
        "assert r.engine.pool.checkedin() == 0, 'a connection survived the warm-up'\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    body, headers = r.verifier.test_delivery()\n"
        "    class In:\n"
        "        def __init__(self): self.d = body\n"
        "        def read(self, n=-1):\n"
        "            c, self.d = self.d[:n], self.d[n:]\n"
        "            return c\n"
        "    env = {'REQUEST_METHOD': 'POST', 'PATH_INFO': '/', 'CONTENT_LENGTH': str(len(body)),\n"
        "           'REMOTE_ADDR': '127.0.0.1', 'wsgi.input': In(),\n"
        "           **{'HTTP_' + k.upper().replace('-', '_'): v for k, v in headers.items()}}\n"
        "    seen = []\n"
        "    out = b''.join(w.application(env, lambda s, h: seen.append(s)))\n"
        "    print(json.dumps({'status': seen[0], 'body': json.loads(out)}), flush=True)\n"
        "    os._exit(0 if seen[0] == '200 OK' else 3)\n"
        "_, code = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(code))\n")
    env = cli_env | {"IIPUB_WEBHOOK_PRELOAD": "1", "OPENAI_WEBHOOK_SECRET": SECRET, "OPENAI_API_KEY": "sk-test"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["body"]["message"] == webhook.TEST_ANSWER
    assert row_count(engine, tables.webhook_deliveries) == 0


@pytest.mark.slow
def test_without_preload_nothing_is_built_at_import(cli_env: dict[str, str], tmp_path: Path) -> None:
    code = "import iipub.webhooks.receiver as w; print(w._receiver is None)"
    env = cli_env | {"OPENAI_WEBHOOK_SECRET": SECRET, "OPENAI_API_KEY": "sk-test"}
    env.pop("IIPUB_WEBHOOK_PRELOAD", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert done.stdout.strip() == "True", done.stderr[-1000:]


# -- retention ---------------------------------------------------------------------------------------


def test_prune_deletes_old_deliveries_and_misses_in_batches_and_keeps_orphans(
        engine: sa.Engine, cli_env: dict[str, str]) -> None:
    ds = Deliveries(engine)
    with db.transaction(engine) as conn:
        now = clock.read_now(conn)
        old, recent = now - dt.timedelta(days=31), now - dt.timedelta(days=29)
        rows = [{"webhook_id": f"wh_old_{i}", "event_type": "response.completed", "outcome": "custody",
                 "received_at": old} for i in range(7)]
        rows += [{"webhook_id": "wh_recent", "event_type": "response.completed", "outcome": "custody",
                  "received_at": recent},
                 {"webhook_id": "wh_waiting", "event_type": "response.completed", "outcome": "awaiting_create",
                  "received_at": old, "response_id": "resp_w"}]
        conn.execute(tables.webhook_deliveries.insert(), rows)
        conn.execute(tables.webhook_misses.insert(), [{"response_id": "resp_m_old", "job_id": "j", "noticed_at": old},
                                                  {"response_id": "resp_m_new", "job_id": "j", "noticed_at": recent}])
        conn.execute(tables.orphans.insert(), [
            {"response_id": f"resp_{name}", "status": "completed", "why": "x", "output": "kept", "first_seen_at": old}
            for name in ("unresolved", "discarded_long_ago", "discarded_lately")])
        conn.execute(tables.orphan_details.insert(), [
            {"response_id": "resp_discarded_long_ago", "fate": "discarded", "fate_at": old},
            {"response_id": "resp_discarded_lately", "fate": "discarded", "fate_at": recent},
            {"response_id": "resp_unresolved", "fate": None, "fate_at": None}])
    assert ds.prune(30, batch=3) == {"webhook_deliveries": 7, "webhook_misses": 1, "orphans": 1}
    assert sorted(r["webhook_id"] for r in deliveries(engine)) == ["wh_recent", "wh_waiting"]
    assert row_count(engine, tables.webhook_misses) == 1
    with engine.connect() as conn:
        left = sorted(conn.execute(sa.select(tables.orphans.c.response_id)).scalars())
    assert left == ["resp_discarded_lately", "resp_unresolved"]
    assert row_count(engine, tables.orphan_details) == 3  # what became of each stays (iipub check reads it)
    with db.transaction(engine) as conn:
        conn.execute(tables.webhook_deliveries.insert(), [{"webhook_id": "wh_old_again", "event_type": "x",
                                                       "outcome": "ignored", "received_at": old}])
    result = run_cli("webhook", "prune", env=cli_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pruned"]["webhook_deliveries"] == 1
    with db.transaction(engine) as conn:
        conn.execute(tables.webhook_deliveries.insert(), [{"webhook_id": "wh_old_3", "event_type": "x",
                                                       "outcome": "ignored", "received_at": old}])
    relayed = run_cli("relay", "--prune", env=cli_env)
    assert relayed.returncode == 0, relayed.stderr
    assert json.loads(relayed.stdout)["webhooks"]["webhook_deliveries"] == 1
    assert row_count(engine, tables.webhook_deliveries) == 2


# -- the signed test delivery --------------------------------------------------------------------------


def test_test_delivery_checks_the_chain_and_records_nothing(server: Server, engine: sa.Engine,
                                                            cli_env: dict[str, str]) -> None:
    env = cli_env | {"OPENAI_WEBHOOK_SECRET": SECRET}
    ok = run_cli("webhook", "test-delivery", url_of(server, "/hooks/openai"), env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ok: ") and "answered 200" in ok.stdout
    assert deliveries(engine) == []
    wrong = run_cli("webhook", "test-delivery", url_of(server),
                    env=env | {"OPENAI_WEBHOOK_SECRET": "whsec_" + "c29tZWJvZHktZWxzZS1lbnRpcmVseQ=="})
    assert wrong.returncode == 1 and "HTTP 400" in wrong.stderr and "not verified" in wrong.stderr
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    gone = run_cli("webhook", "test-delivery", f"http://127.0.0.1:{port}/", "--timeout", "2", env=env)
    assert gone.returncode == 1 and "not answered" in gone.stderr
    bad = run_cli("webhook", "test-delivery", "ftp://x", env=env)
    assert bad.returncode == 2
    assert deliveries(engine) == []


# -- many slow clients do not starve a real delivery ------------------------------------------------------


@pytest.mark.slow
def test_100_slow_clients_do_not_keep_a_signed_delivery_from_its_budget(hooked: Settings, engine: sa.Engine,
                                                                         sim: Simulator) -> None:
    settings = replace(hooked, webhooks=replace(hooked.webhooks, read_seconds=8, request_seconds=5, threads=4))
    trickling_clients = bench_module("webhook_load").trickling_clients  # the benchmark's slow clients
    with served(settings, engine) as (_, srv), trickling_clients(srv.port, 100, path="/", timeout=10) as socks:
        try:
            time.sleep(1)
            body = json.dumps({"id": "evt_s", "object": "event", "type": "batch.completed", "created_at": 1,
                               "data": {"id": "batch_s"}}).encode()
            started = time.monotonic()
            answer = httpx.post(url_of(srv), content=body, headers=signed(body, webhook_id="wh_amid_slow"),
                                timeout=30)
            took = time.monotonic() - started
        finally:
            for s in socks:
                s.close()
    assert answer.status_code == 200, answer.text
    assert took < settings.webhooks.request_seconds, took
    assert [r["webhook_id"] for r in deliveries(engine)] == ["wh_amid_slow"]


def test_webhook_serve_config_errors_are_one_line(cli_env: dict[str, str], tmp_path: Path) -> None:
    for toml, needle in (("[webhooks]\nthreads = 0\n", "[webhooks] threads"),
                         ("[webhooks]\nbacklog = 5\n", "[webhooks] backlog"),
                         ("[webhooks]\nread_seconds = 0\n", "[webhooks] read_seconds"),
                         ("[webhooks]\nkeep_days = 0\n", "[webhooks] keep_days"),
                         ('[webhooks]\ntrusted_proxies = ["nginx"]\n', "[webhooks] trusted_proxies"),
                         ('[webhooks]\ntrusted_proxies = "127.0.0.1"\n', "[webhooks] trusted_proxies")):
        path = tmp_path / "c.toml"
        path.write_text(toml)
        result = run_cli("webhook", "serve", "--port", "0",
                         env=cli_env | {"IIPUB_CONFIG": str(path), "OPENAI_WEBHOOK_SECRET": SECRET})
        assert result.returncode == 78, (toml, result.stderr)
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], (toml, lines)
    assert os.environ.get("IIPUB_WEBHOOK_PRELOAD") is None


def test_keep_alive_ends_after_keepalive_requests(hooked: Settings, engine: sa.Engine) -> None:
    settings = replace(hooked, webhooks=replace(hooked.webhooks, keepalive_requests=2))
    with served(settings, engine) as (_, srv):
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        try:
            answers = []
            for i in range(2):
                body = json.dumps({"id": f"evt_k{i}", "object": "event", "type": "batch.completed", "created_at": 1,
                                   "data": {"id": "batch_k"}}).encode()
                conn.request("POST", "/", body=body, headers=signed(body, webhook_id=f"wh_keep_{i}"))
                got = conn.getresponse()
                got.read()
                answers.append((got.status, got.getheader("connection")))
        finally:
            conn.close()
    assert answers == [(200, None), (200, "close")]  # the second request on the connection is its last
