"""What the payment authority (`authority`) sees, collected for one job: its stored output and
its language tracks' parts, the editions saved for its slot, this installation's spend ledger
chain, the legacy system's decisions file, the live site and the deployed configuration. Every
path that can lead to a create calls `ruling` (the sweep with `Route.SWEEP` right before its
create; `executor` before an operator command sends a job back to CREATE_ELIGIBLE).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from iipub.model.jobs import Job
from iipub.model.states import TRACK_SAVED, Reason
from iipub.money import authority, restore
from iipub.money.authority import Facts, Route, Ruling
from iipub.money.spend import SlotSpend, slot_of
from iipub.settings.config import Settings
from iipub.store import job_queries
from iipub.store.handles import Engine

# The legacy decisions file is read whole, line by line (as `status` reads it): its newest
# decisions are at its end.
_legacy_cache: dict[tuple[str, int, int], dict[str, set[str]]] = {}
# The operator entries that send a job back to CREATE_ELIGIBLE and may carry a pay-again.
_GRANTING = (Reason.OPERATOR_RELEASE_VERIFIED_LOST.value, Reason.OPERATOR_REGENERATE.value,
             Reason.OPERATOR_CORRECT_REGENERATE.value)


def ruling(settings: Settings, engine: Engine, job: Job, route: Route, *, spend: SlotSpend | None = None,
           ledger_ahead: tuple[str, ...] = (), pay_again: str | None = None,
           replacing: tuple[str, ...] = ()) -> Ruling:
    """Ask the authority about `job` on `route`. On the sweep, the operator decision that sent
    the job back (journaled since its last accepted create) counts: a `regenerate` declared the
    held output bad (it is not evidence), a `correct --regenerate` also names the public editions
    it replaces (what the create buys), a pay-again overrides the evidence it names."""
    f = facts(settings, engine, job, route, spend=spend, ledger_ahead=ledger_ahead, pay_again=pay_again,
              replacing=replacing)
    found = authority.may_pay(f, route)
    if not found.allowed and route == Route.SWEEP and (
            found.evidence in authority.OVERRIDABLE or found.evidence == authority.Evidence.LANGUAGES):
        entry, granted, named = operator_entry(engine, job.id)
        if entry in (Reason.OPERATOR_REGENERATE.value, Reason.OPERATOR_CORRECT_REGENERATE.value):
            f = dataclasses.replace(f, payload_sha256=None, track_payloads={})
        if entry == Reason.OPERATOR_CORRECT_REGENERATE.value:
            f = dataclasses.replace(f, replacing=named)
        if entry is not None:
            return authority.may_pay(dataclasses.replace(f, pay_again=granted), route)
    return found


def facts(settings: Settings, engine: Engine, job: Job, route: Route, *, spend: SlotSpend | None = None,
          ledger_ahead: tuple[str, ...] = (), pay_again: str | None = None, replacing: tuple[str, ...] = ()) -> Facts:
    product = settings.products.get(job.product)
    day = job.edition_date.isoformat()
    tracks, saved = job_queries.parts_and_editions(engine, job)
    if not replacing and saved:  # a paid correction under way buys its languages again, whoever asks
        named = _json(job_queries.correction_pending(engine, job.id)).get("languages")
        replacing = tuple(str(n) for n in named) if isinstance(named, list) else ()
    # A part an operator's `regenerate` declared bad is not held output (it was not bought again).
    bad = declared_bad(job_queries.forks_and_regenerations(engine, job.id)) if tracks else set()
    saved |= {lang for lang, state, _ in tracks if state in {s.value for s in TRACK_SAVED}}
    held = {lang: sha for lang, state, sha in tracks if sha and lang not in saved and lang not in bad}
    drift = None
    if route == Route.SWEEP and product is not None and job.config_fingerprint \
            and not product.fingerprint_matches(job.config_fingerprint):
        drift = (job.config_fingerprint, product.fingerprint())
    fence_pending = (route != Route.SWEEP and spend is not None and spend.charged > job.generation_attempts
                     and job.quarantine_reason != Reason.RESTORED_BEHIND_LEDGER)
    if route != Route.SWEEP and spend is not None and not ledger_ahead:
        ledger_ahead = ledger_output(job, spend, held)
    live: list[str] = []
    if settings.static_sink is not None and product is not None:
        root = Path(settings.static_sink.root)
        # A withdrawn edition counts: its withdrawal is what the site serves, and stays.
        live = [lang for lang in product.languages
                if restore.live_sha256(root, job.product, day, lang) is not None
                or restore.withdrawn_sha256(root, job.product, day, lang) is not None]
    return Facts(
        job_id=job.id, slot=slot_of(job.product, day), payload_sha256=job.payload_sha256, track_payloads=held,
        saved=sorted(saved), ledger=spend, ledger_ahead=ledger_ahead,
        legacy=sorted(legacy_actions(settings, job.product, day)), live=live,
        languages=product.languages if product is not None else None, drift=drift, pay_again=pay_again,
        fence_pending=fence_pending, replacing=replacing)


def declared_bad(entries: Iterable[tuple[str, str | None, str | None]]) -> set[str]:
    """The languages whose kept part an operator's `regenerate` declared bad after it forked, from
    the journal's (reason, lang, detail) of forks and regenerations in order: that part is no
    longer evidence the slot's output is held (a new generation's response lost on its way is
    created again, not refused for it). A later fork (new custody) clears it."""
    forked: set[str] = set()
    bad: set[str] = set()
    for reason, lang, detail in entries:
        if reason == Reason.FORKED.value and lang:
            forked.add(lang)
            bad.discard(lang)
        elif reason == Reason.OPERATOR_REGENERATE.value:
            named = _json(detail).get("languages")
            bad |= forked if not isinstance(named, list) else forked & {str(n) for n in named}
    return bad


def ledger_output(job: Job, spend: SlotSpend, held: dict[str, str]) -> tuple[str, ...]:
    """The output links this installation's ledger records for the slot that the job does not
    hold: a custody whose payload is neither on the row nor in a track (a restore forgot it), a
    publication whose editions this database never saved. (The sweep's restore fence compares
    the journal instead, before it asks the authority.)"""
    links: list[str] = []
    if spend.custody_sha256 and spend.custody_response_id not in spend.killed_ids \
            and job.payload_sha256 is None and not held:
        links.append("custody")
    if spend.published_editions and not job.composed_sha256 and job.payload_sha256 is None:
        links.append("published")
    return tuple(links)


def legacy_actions(settings: Settings, product: str, day: str) -> set[str]:
    """What the legacy decisions file says the legacy system did for the slot (create, publish,
    …); empty without a file. Read again only when the file changed."""
    path = settings.reconcile.legacy_decisions_file
    if path is None:
        return set()
    try:
        st = os.stat(path)
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key not in _legacy_cache:
            with open(path, encoding="utf-8", errors="replace") as f:
                found = _by_slot(f)
            _legacy_cache.clear()
            _legacy_cache[key] = found
    except OSError:
        return set()  # `status` reports an unreadable file
    return set(_legacy_cache[key].get(slot_of(product, day), set()))


def _by_slot(lines: Iterable[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in lines:
        try:
            rec = json.loads(line)
            slot = slot_of(str(rec["product"]), str(rec["edition_date"])[:10])
            out.setdefault(slot, set()).add(str(rec["action"]))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def operator_entry(engine: Engine, job_id: str) -> tuple[str | None, str | None, tuple[str, ...]]:
    """The operator entry that sent the job back to CREATE_ELIGIBLE, its pay-again reason and the
    languages a correction replaces, if no create was accepted since (one decision buys one
    create): (reason, pay-again, languages) or (None, None, ())."""
    rows = job_queries.newest_entries(engine, job_id, 200)
    for reason, detail in rows:
        if reason == Reason.ACCEPTED.value:
            return None, None, ()
        if reason in _GRANTING:
            doc = _json(detail)
            grant = doc.get("pay_again")
            named = doc.get("languages") if reason == Reason.OPERATOR_CORRECT_REGENERATE.value else None
            return (reason, (str(grant.get("why")) if isinstance(grant, dict) and grant.get("why") else None),
                    tuple(str(n) for n in named) if isinstance(named, list) else ())
    return None, None, ()


def _json(text: str | None) -> dict[str, Any]:
    try:
        doc = json.loads(text or "{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
