"""The one write the job store makes to the `spend` table: custody of a paid create's output
records the usage the provider reported on that create's row, in the custody transaction itself
(`job_store.Store.transition`). The row states are `model.spend_states`; everything else about
the table is `money.payments`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from iipub.model.jobs import Job
from iipub.model.spend_states import NOT_CHARGED, SETTLED
from iipub.store import clock, tables

spend_table = tables.spend
_s = spend_table.c


def record_usage(conn: Connection, job: Job, changes: Mapping[str, Any], detail: Mapping[str, Any]) -> None:
    """Custody stored the output and added its usage to the job: the create that paid for it
    (the row of the job's response, else of its current attempt) takes the reported usage."""
    tokens = {k: int(changes[k]) - int(getattr(job, k)) for k in ("input_tokens", "output_tokens", "total_tokens")
              if k in changes}
    if tokens.get("total_tokens", 0) <= 0:
        return
    response_id = changes.get("response_id", job.response_id)
    row = None
    if response_id:
        row = conn.execute(sa.select(_s.id).where(_s.job_id == job.id, _s.response_id == response_id)
                           .order_by(_s.id.desc()).limit(1)).scalar()
    if row is None:
        row = conn.execute(sa.select(_s.id).where(_s.job_id == job.id, _s.attempt == job.generation_attempts,
                                                  _s.state.not_in(NOT_CHARGED))
                           .order_by(_s.id.desc()).limit(1)).scalar()
    if row is None:  # a create paid before the spend table existed
        return
    values: dict[str, Any] = {**tokens, "state": SETTLED, "updated_at": clock.now(conn)}
    tier = detail.get("service_tier")
    if isinstance(tier, str) and tier:
        values["tier_reported"] = tier[:16]
    conn.execute(spend_table.update().where(_s.id == row).values(**values))
