"""The webhooks the simulator sends: one signed event per finished background response.

OpenAI announces a background response's end with a Standard Webhooks POST (`webhook-id`,
`webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`), retried on failure with the
same id and body but a fresh timestamp and signature. The sender does the same from a daemon
thread that polls the backend, so finishes brought about by `advance()` or a cancel are seen as
well as those that come with time. The webhook faults give a receiver what it must survive:
events that never come, come twice, come late or out of order, forged, or replayed.

Each HTTP attempt runs in a short-lived daemon thread, so a receiver that hangs holds up
neither the other events nor `stop()`; an abandoned attempt ends at its timeout and closes the
client if it was the last one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import structlog

from iipub.core.errors import ConfigError
from iipub.provider.openai.simulator import faults as f
from iipub.provider.openai.simulator.backend import Backend, Finished

SECRET_PREFIX = "whsec_"
POLL_SECONDS = 0.02  # how often the backend is asked for new finishes (real time)
BACKOFF_SECONDS = 0.25  # first retry delay; doubles per retry (real time)
REPLAY_AGE_SECONDS = 600  # beyond the receivers' +-5 min tolerance
LOG_SIZE = 2000  # attempts kept for `stats()["webhooks"]`
_MAX_IN_FLIGHT = 8
_STOP_JOIN_SECONDS = 1.0

log = structlog.get_logger("iipub.simulator")
# Faults that shape a delivery's first attempt (named on that attempt in the log).
_FIRST_ATTEMPT_FAULTS = frozenset({f.WEBHOOK_LATE, f.WEBHOOK_OUT_OF_ORDER, f.WEBHOOK_BAD_SIGNATURE})
_SHAPING_FAULTS = tuple(name for name in f.WEBHOOK_FAULTS if name != f.WEBHOOK_DROPPED)


def parse_secret(secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret. The message never repeats the secret."""
    if not secret.startswith(SECRET_PREFIX):
        raise ConfigError("the webhook secret must be whsec_<base64>")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("the webhook secret must be whsec_<base64>: the part after whsec_ is not base64") from None
    if not key:
        raise ConfigError("the webhook secret must be whsec_<base64>: the key is empty")
    return key


def sign(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value: what `openai`'s and `standardwebhooks`' verifiers check."""
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


class WebhookLog:
    """What the sender did, for `sim.stats()`: attempts made, answers seen, the last attempts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent = 0
        self._answers: Counter[str] = Counter()
        self._attempts: deque[dict[str, Any]] = deque(maxlen=LOG_SIZE)

    def record(self, attempt: dict[str, Any]) -> None:
        with self._lock:
            self._sent += 1
            answer = attempt["answer"]
            self._answers["error" if answer is None else str(answer)] += 1
            self._attempts.append(attempt)

    def reset(self) -> None:
        with self._lock:
            self._sent = 0
            self._answers.clear()
            self._attempts.clear()

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "webhooks_sent": self._sent,
                "webhook_answers": dict(self._answers),
                "webhooks": [dict(a) for a in self._attempts],
            }


@dataclass
class _Delivery:
    """One event on its way: the genuine delivery, then its duplicate or replay if faults say so."""

    event: Finished
    url: str  # the endpoint this copy goes to
    webhook_id: str
    event_id: str
    body: bytes
    faults: frozenset[str]
    ready_at: float  # time.monotonic() of the next attempt
    held: bool = False  # out of order: waiting for another response's event to be sent
    phase: str = "genuine"  # "genuine" | "duplicate" | "replay"
    attempts: int = 0  # HTTP attempts made for this webhook-id, all phases
    retries: int = 0  # retries made in the current phase
    first_timestamp: int | None = None  # the genuine first attempt's; a replay is older still
    in_flight: bool = False


class WebhookSender:
    """Announces finished background responses to each of `urls` (one delivery per endpoint, each
    with its own webhook-id, as for a project with several endpoints), signed with `key`. Started
    and stopped by the simulator; `stopping` is the simulator's event, set before `stop()`."""

    def __init__(
        self,
        backend: Backend,
        log: WebhookLog,
        stopping: threading.Event,
        *,
        urls: tuple[str, ...],
        key: bytes,
        late_seconds: float,
        retries: int,
        timeout_seconds: float,
        log_sends: bool = False,
    ) -> None:
        self._backend = backend
        self._log = log
        self._stopping = stopping
        self._urls = urls
        self._key = key
        self._wrong_key = hashlib.sha256(b"not the webhook secret:" + key).digest()
        self._late = late_seconds
        self._retries = retries
        self._timeout = timeout_seconds
        self._log_sends = log_sends
        self._lock = threading.Lock()
        self._pending: list[_Delivery] = []
        self._in_flight = 0
        self._generation = 0  # bumped by a reset: attempts of an older one are not recorded
        self._stopped = False
        self._client: httpx.Client | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        connect = min(self._timeout, 2.0)
        self._client = httpx.Client(
            timeout=httpx.Timeout(self._timeout, connect=connect), trust_env=False, follow_redirects=False
        )
        self._thread = threading.Thread(target=self._run, name="iipub-simulator-webhooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sending; what is pending is dropped. Returns within about a second even while
        an attempt hangs: that attempt is abandoned and closes the client when it ends."""
        if self._thread is not None:
            self._thread.join(timeout=_STOP_JOIN_SECONDS)
        with self._lock:
            self._stopped = True
            self._pending.clear()
            client = self._client if self._in_flight == 0 else None
        if client is not None:
            client.close()

    def idle(self) -> bool:
        """Nothing left to announce or send (held, retrying or in flight)."""
        with self._lock:
            return not self._pending and self._in_flight == 0 and self._backend.unannounced_finished() == 0

    @contextmanager
    def resetting(self) -> Iterator[None]:
        """Hold the sender still while the simulator forgets everything: pending sends are
        dropped and attempts already in flight go unrecorded."""
        with self._lock:
            self._generation += 1
            self._pending.clear()
            yield

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._tick()
            self._stopping.wait(POLL_SECONDS)

    def _tick(self) -> None:
        with self._lock:
            if self._stopped:
                return
            for event in self._backend.take_finished():
                self._plan(event)
            now = time.monotonic()
            room = _MAX_IN_FLIGHT - self._in_flight
            for delivery in [d for d in self._pending if not d.in_flight and d.ready_at <= now][: max(room, 0)]:
                delivery.in_flight = True
                self._in_flight += 1
                threading.Thread(
                    target=self._attempt, args=(delivery, self._generation), name="iipub-simulator-webhook",
                    daemon=True,
                ).start()

    def _plan(self, event: Finished) -> None:
        """Draw the event's faults and queue it. Under the lock."""
        faults = self._backend.faults
        if faults.take_first(f.WEBHOOK_OP, event.job_id, (f.WEBHOOK_DROPPED,)):
            self._backend.record_faults([f.WEBHOOK_DROPPED])
            return
        fired = faults.take(f.WEBHOOK_OP, event.job_id, _SHAPING_FAULTS)
        self._backend.record_faults(fired)
        drawn = frozenset(fired)
        payload = {
            "id": "evt_" + secrets.token_hex(16),
            "object": "event",
            "created_at": event.finished_at,
            "type": f"response.{event.status}",
            "data": {"id": event.response_id},
        }
        held = f.WEBHOOK_OUT_OF_ORDER in drawn
        delay = self._late if held or f.WEBHOOK_LATE in drawn else 0.0
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        for url in self._urls:
            self._pending.append(
                _Delivery(
                    event=event,
                    url=url,
                    webhook_id="wh_" + secrets.token_hex(16),
                    event_id=str(payload["id"]),
                    body=body,
                    faults=drawn,
                    ready_at=time.monotonic() + delay,
                    held=held,
                )
            )

    def _attempt(self, d: _Delivery, generation: int) -> None:
        """One HTTP attempt, in its own thread; then what comes next (retry, duplicate, replay)."""
        phase = d.phase
        bad = phase == "genuine" and d.attempts == 0 and f.WEBHOOK_BAD_SIGNATURE in d.faults
        if phase == "replay":
            timestamp = (d.first_timestamp or int(time.time())) - REPLAY_AGE_SECONDS
        else:
            timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": "iipub-simulator (OpenAI webhooks)",
            "webhook-id": d.webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self._wrong_key if bad else self._key, d.webhook_id, timestamp, d.body),
        }
        answer: int | None = None
        client = self._client
        try:
            if client is not None:
                answer = client.post(d.url, content=d.body, headers=headers).status_code
        except (httpx.HTTPError, RuntimeError):  # RuntimeError: a client closed under us
            answer = None
        close: httpx.Client | None = None
        with self._lock:
            self._in_flight -= 1
            d.in_flight = False
            if self._stopped or generation != self._generation:
                if self._stopped and self._in_flight == 0:
                    close = self._client
            else:
                self._after(d, phase, bad, timestamp, answer)
        if close is not None:
            close.close()

    def _after(self, d: _Delivery, phase: str, bad: bool, timestamp: int, answer: int | None) -> None:
        """Record an attempt and schedule what follows it. Under the lock."""
        fault: str | None = None
        if phase == "genuine":
            if d.attempts == 0:
                fault = ",".join(sorted(d.faults & _FIRST_ATTEMPT_FAULTS)) or None
            d.first_timestamp = d.first_timestamp or timestamp
        else:
            fault = f.WEBHOOK_DUPLICATE if phase == "duplicate" else f.WEBHOOK_REPLAYED
        d.attempts += 1
        self._log.record({
            "webhook_id": d.webhook_id,
            "event_id": d.event_id,
            "type": f"response.{d.event.status}",
            "response_id": d.event.response_id,
            "job_id": d.event.job_id,
            "url": d.url,
            "attempt": d.attempts,
            "answer": answer,
            "fault": fault,
            "stale": phase == "replay",
        })
        if self._log_sends:
            shown = "error" if answer is None else answer
            log.info("sim_webhook", type=f"response.{d.event.status}", response_id=d.event.response_id,
                     answer=shown, fault=fault,
                     message=f"webhook response.{d.event.status} {d.event.response_id} -> {shown}")
        now = time.monotonic()
        for other in self._pending:  # an event has been sent: out-of-order ones held for it may go
            if other.held and other.event.response_id != d.event.response_id:
                other.held = False
                if f.WEBHOOK_LATE not in other.faults:
                    other.ready_at = min(other.ready_at, now)
        ok = answer is not None and 200 <= answer < 300 and not bad
        budget = max(self._retries, 1) if bad else self._retries  # a forged attempt is always followed
        if phase != "replay" and not ok and d.retries < budget:
            d.retries += 1
            d.ready_at = now + BACKOFF_SECONDS * 2 ** (d.retries - 1)
            return
        d.retries = 0
        d.ready_at = now
        if phase == "genuine" and f.WEBHOOK_DUPLICATE in d.faults:
            d.phase = "duplicate"
        elif phase != "replay" and f.WEBHOOK_REPLAYED in d.faults:
            d.phase = "replay"
        else:
            self._pending.remove(d)
