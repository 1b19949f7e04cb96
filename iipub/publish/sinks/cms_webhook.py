"""Webhook sink: POST each event to a CMS, signed per Standard Webhooks.

The receiver deduplicates on `Idempotency-Key` / `webhook-id` (the event id), which is what
makes at-least-once delivery by the relay publish exactly once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Callable

import httpx

from iipub.core import tls
from iipub.core.backoff import parse_retry_after
from iipub.core.closing import Closing
from iipub.publish.sinks import EditionEvent, Parked, Published, PublishResult, RetryLater

_RETRY_STATUSES = frozenset({408, 409, 425, 429})
_SNIPPET = 200


SECRET_PREFIX = "whsec_"


def _key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: base64 after an optional `whsec_` prefix,
    exactly as the reference libraries read it (so any receiver using one can verify). A
    secret that is not base64 is refused rather than used as raw bytes, which no receiver
    would verify."""
    text = secret.strip()
    text = text.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise ValueError("webhook secret must be 'whsec_' followed by base64 (Standard Webhooks); "
                         "generate one with: python3 -c \"import base64, os; "
                         "print('whsec_' + base64.b64encode(os.urandom(32)).decode())\"") from None
    if len(key) < 16:
        raise ValueError("webhook secret is shorter than 16 bytes once base64-decoded")
    return key


def sign(secret: str, msg_id: str, timestamp: int | str, body: bytes | str) -> str:
    """The `webhook-signature` value: `v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    signed = f"{msg_id}.{timestamp}.".encode() + raw
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode("ascii")


class WebhookSink(Closing):
    name = "webhook"

    def __init__(
        self,
        url: str,
        secret: str,
        client: httpx.Client | None = None,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secret:
            raise ValueError("webhook secret is empty")
        _key(secret)  # fail at start-up, not at the first delivery
        self.url = url
        self._secret = secret
        self._timeout = timeout
        self._clock = clock
        self._owns_client = client is None
        # Redirects are not followed: a signed POST must reach the configured receiver only.
        self._client = client if client is not None else httpx.Client(
            timeout=timeout, follow_redirects=False, verify=tls.client_context())

    def __repr__(self) -> str:  # never show the secret
        return f"WebhookSink(url={self.url!r})"

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def headers(self, event: EditionEvent, body: bytes) -> dict[str, str]:
        timestamp = str(int(self._clock()))
        return {
            "Content-Type": "application/json",
            "Idempotency-Key": event.event_id,
            "webhook-id": event.event_id,
            "webhook-timestamp": timestamp,
            "webhook-signature": sign(self._secret, event.event_id, timestamp, body),
        }

    def publish(self, event: EditionEvent) -> PublishResult:
        body = event.body()
        try:
            with self._client.stream(
                "POST", self.url, content=body, headers=self.headers(event, body), timeout=self._timeout
            ) as resp:
                status = resp.status_code
                snippet = _read_snippet(resp) if status >= 300 else ""
                retry_after = resp.headers.get("retry-after")
        except httpx.TimeoutException as exc:
            return RetryLater(None, f"webhook: timeout ({type(exc).__name__})")
        except httpx.TransportError as exc:
            return RetryLater(None, f"webhook: {type(exc).__name__}: {_short(str(exc))}")
        except httpx.InvalidURL as exc:
            return Parked(f"webhook: invalid URL: {_short(str(exc))}")

        if 200 <= status < 300:
            return Published()
        why = f"HTTP {status}: {snippet}" if snippet else f"HTTP {status}"
        if status in _RETRY_STATUSES or status >= 500:
            return RetryLater(parse_retry_after(retry_after, self._clock()), f"webhook: {why}")
        # 3xx (not followed) and other 4xx: the receiver refuses this event as it is.
        return Parked(why)


def _read_snippet(resp: httpx.Response) -> str:
    # Read only the start of an error body: the receiver's size is not ours to trust.
    got = b""
    try:
        for chunk in resp.iter_bytes():
            got += chunk
            if len(got) >= 2048:
                break
    except httpx.HTTPError:
        pass
    return _short(got.decode("utf-8", "replace"))


def _short(text: str) -> str:
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text[:_SNIPPET] + ("…" if len(text) > _SNIPPET else "")
