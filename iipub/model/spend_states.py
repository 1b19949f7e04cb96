"""The states of a `spend` row (one per paid create), as values. Pure.

A row is written `in_flight` in the dispatch's own transaction, given the create's outcome after
it (`accepted`, `unknown`, `refused`, `rejected`), and `settled` when custody records the usage
the provider reported. `money.payments` writes and reads the table; `store.spend_rows` records
the usage.
"""

from __future__ import annotations

IN_FLIGHT, ACCEPTED, UNKNOWN, SETTLED, REFUSED, REJECTED = (
    "in_flight", "accepted", "unknown", "settled", "refused", "rejected")
# Provably not charged: the provider refused or rejected the create.
NOT_CHARGED = (REFUSED, REJECTED)
