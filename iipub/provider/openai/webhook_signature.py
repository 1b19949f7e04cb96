"""OpenAI's webhooks, verified: the Standard Webhooks signature over the raw body, checked by the
official SDK (constant-time, ±5 minutes) before anything in the body is believed, and the event
read in iipub's words (`outcomes.VerifiedEvent`). Also the other side, signing as OpenAI signs:
`iipub webhook test-delivery` and the simulator's tests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
import typing
from collections.abc import Mapping

from iipub.provider.outcomes import DeliveryRejected, EventKind, VerifiedEvent

TOLERANCE_SECONDS = 300  # the SDK's and Standard Webhooks' window, both ways
RESPONSE_EVENTS = frozenset({"response.completed", "response.failed", "response.cancelled", "response.incomplete"})
# `iipub webhook test-delivery`: verified, answered 200, nothing recorded or settled.
TEST_EVENT = "iipub.test_delivery"
SECRET_PREFIX = "whsec_"
_WEBHOOK_ID = re.compile(r"[\x21-\x7e]{1,255}")
_RESPONSE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
_PRINTABLE = re.compile(r"[\x20-\x7e]{1,2000}")
# One signature: a version, a comma, base64. Two headers joined by a server ("a, b") do not match.
_SIGNATURE = re.compile(r"v[0-9]{1,3}[a-z]?,[A-Za-z0-9+/]+={0,2}")


def _known_event_types() -> frozenset[str]:
    """Every event type the SDK knows (its union of webhook event models): an unknown one is
    answered 200 and counted, a known one that is not about a response is recorded and ignored."""
    from openai.types.webhooks import UnwrapWebhookEvent

    union = typing.get_args(UnwrapWebhookEvent)
    members = typing.get_args(union[0]) if union and typing.get_origin(union[0]) is typing.Union else union
    found: set[str] = set()
    for model in members:
        field = getattr(model, "model_fields", {}).get("type")
        if field is not None:
            found.update(str(v) for v in typing.get_args(field.annotation))
    return frozenset(found) | RESPONSE_EVENTS


class Verifier:
    """The webhook deliveries of one secret (`OPENAI_WEBHOOK_SECRET`), verified and read."""

    def __init__(self, secret: str) -> None:
        import openai

        self._secret = secret
        # The SDK's verifier lives on a client; this one never sends a request.
        self._sdk = openai.OpenAI(
            api_key="verify-only", base_url="http://127.0.0.1:9/", max_retries=0).webhooks
        self._known = _known_event_types()

    def verify(self, body: bytes, headers: Mapping[str, str]) -> VerifiedEvent:
        """The event in `body`, once the SDK verified it came from the provider; `DeliveryRejected`
        otherwise (bad, missing or duplicated signature headers, a timestamp outside ±5 minutes,
        a body that is not an event)."""
        import openai

        lowered = {k.lower(): v for k, v in headers.items() if k.lower() in HEADERS}
        missing = [h for h in HEADERS if not lowered.get(h)]
        if missing:
            raise DeliveryRejected(f"missing header(s): {', '.join(missing)}")
        for name in HEADERS:
            if not _PRINTABLE.fullmatch(lowered[name]):
                raise DeliveryRejected(f"{name} is not printable ASCII")
        if "," in lowered["webhook-id"] or "," in lowered["webhook-timestamp"]:
            raise DeliveryRejected("duplicate webhook-id or webhook-timestamp header")
        if not all(_SIGNATURE.fullmatch(sig) for sig in lowered["webhook-signature"].split(" ")):
            raise DeliveryRejected("duplicate or malformed webhook-signature header")
        try:
            self._sdk.verify_signature(body, lowered, secret=self._secret, tolerance=TOLERANCE_SECONDS)
        except openai.InvalidWebhookSignatureError as exc:
            raise DeliveryRejected(f"not verified: {exc}") from None
        except ValueError as exc:  # undecodable body or header
            raise DeliveryRejected(f"not verified: {type(exc).__name__}") from None
        webhook_id = lowered["webhook-id"]
        if not _WEBHOOK_ID.fullmatch(webhook_id):
            raise DeliveryRejected("webhook-id is not 1-255 printable characters")
        try:
            doc = json.loads(body)
        except ValueError:
            raise DeliveryRejected("body is not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("type"), str) or not doc["type"]:
            raise DeliveryRejected("body is not an event object with a type")
        kind = doc["type"]
        event_id = doc.get("id") if isinstance(doc.get("id"), str) else None
        created = doc.get("created_at")
        created_at = created if isinstance(created, int) and not isinstance(created, bool) else None
        response_id = None
        if kind in RESPONSE_EVENTS:
            data = doc.get("data")
            rid = data.get("id") if isinstance(data, dict) else None
            if not isinstance(rid, str) or not _RESPONSE_ID.fullmatch(rid):
                raise DeliveryRejected("response event without a valid data.id")
            response_id = rid
        return VerifiedEvent(webhook_id, event_id[:255] if event_id else None, kind, response_id, created_at,
                             self._kind(kind))

    def _kind(self, event_type: str) -> EventKind:
        if event_type == TEST_EVENT:
            return EventKind.TEST
        if event_type in RESPONSE_EVENTS:
            return EventKind.RESPONSE_ENDED
        return EventKind.OTHER if event_type in self._known else EventKind.UNKNOWN

    def test_delivery(self) -> tuple[bytes, dict[str, str]]:
        """A `TEST_EVENT` delivery and its signed headers (`iipub webhook test-delivery`)."""
        return signed_test_delivery(self._secret)


def sign(secret: str, webhook_id: str, body: bytes, when: int) -> dict[str, str]:
    """Standard Webhooks headers for `body`, signed exactly as the provider signs (HMAC-SHA256
    over `id.timestamp.body`; a `whsec_` secret is base64)."""
    key = base64.b64decode(secret[6:]) if secret.startswith(SECRET_PREFIX) else secret.encode()
    mac = hmac.new(key, f"{webhook_id}.{when}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": webhook_id, "webhook-timestamp": str(when),
            "webhook-signature": "v1," + base64.b64encode(mac).decode(), "content-type": "application/json"}


def signed_test_delivery(secret: str) -> tuple[bytes, dict[str, str]]:
    """A `TEST_EVENT` delivery and its signed headers."""
    when = int(time.time())
    nonce = secrets.token_hex(8)
    body = json.dumps({"id": f"evt_iipub_test_{nonce}", "object": "event", "type": TEST_EVENT, "created_at": when,
                       "data": {}}).encode()
    return body, sign(secret, f"wh_iipub_test_{nonce}", body, when)
