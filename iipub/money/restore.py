"""The restore fence: what a job's database knows of its slot's chain, against the spend ledger.

The ledger's chain lines (custody, saved, published) are written after the database committed
each step, so a database knows at least as many of them as the ledger, unless it was restored
from a backup taken before them. What the database knows is read from its journal (which a
restore takes back in time too): custody, `saved` and `all_events_delivered` entries, counted
from the last entry that acknowledged the ledger (`ledger_ack`: an adoption after a restore, the
quarantine that parked it, or an operator's release that charged the ledger's count).

A job found behind is never paid for again: `steps` adopts it from what the ledger and the live
site prove (`published_live`: the static sink still serves the editions whose sha256 the
ledger recorded) or parks it `restored_behind_ledger` with this evidence.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from iipub.edition.compose import artifact_from_json
from iipub.edition.paths import json_path
from iipub.model.jobs import Job
from iipub.model.states import Reason
from iipub.money.ledger import SpendLedger
from iipub.money.spend import CHAIN, SlotSpend, has_chain
from iipub.settings.config import Settings
from iipub.store import installation, job_queries
from iipub.store.handles import Engine


def ledger_of(settings: Settings, engine: Engine) -> SpendLedger | None:
    """The spend ledger as this database's installation writes and reads it (its lines named by
    the installation id; old unnamed lines its own only when their job or response is known
    here), or None when the ledger is off."""
    path = settings.ledger_path()
    if path is None:
        return None
    return SpendLedger(path, installation.read(engine), legacy_owner(engine), settings.ledger_mirror_path())


def legacy_owner(engine: Engine) -> Callable[[str, frozenset[str]], bool]:
    """Whether an old ledger line's job (or a response it names) is known to this database: such
    a line was written by this installation before lines named theirs."""
    known: list[tuple[set[str], set[str]]] = []  # (job ids, response ids), read once at the first old line

    def ours(job_id: str, response_ids: frozenset[str]) -> bool:
        if not known:
            known.append(job_queries.known_ids(engine))
        jobs, responses = known[0]
        return job_id in jobs or not responses.isdisjoint(response_ids)

    return ours


ACK = "ledger_ack"  # the journal detail key of an entry that acknowledged the ledger's chain
CUSTODY_REASONS = frozenset({Reason.RETRIEVED, Reason.OPERATOR_HARVEST, Reason.OPERATOR_IMPORT_PAYLOAD,
                             Reason.OPERATOR_ADOPT_ORPHAN})
ACKING_REASONS = frozenset({Reason.RESTORED_BEHIND_LEDGER, Reason.RESTORED_ADOPTED, Reason.RESTORED_PUBLISHED,
                            Reason.OPERATOR_RELEASE_VERIFIED_LOST})
_LINK_OF = {**dict.fromkeys(CUSTODY_REASONS, "custody"), Reason.SAVED: "saved",
            Reason.ALL_EVENTS_DELIVERED: "published"}


def known(engine: Engine, job_id: str) -> dict[str, int]:
    """How many of each chain link the job's journal knows of."""
    wanted = [r.value for r in (*_LINK_OF, *ACKING_REASONS)]
    rows = job_queries.slot_entries(engine, job_id, wanted)
    counts = dict.fromkeys(CHAIN, 0)
    for reason, detail in rows:
        link = _LINK_OF.get(Reason(reason))
        if link is not None:
            counts[link] += 1
            continue
        ack = _ack_of(detail)
        if ack is not None:
            counts = {k: _count(ack.get(k)) for k in CHAIN}
    return counts


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _ack_of(detail: str | None) -> Mapping[str, object] | None:
    try:
        doc = json.loads(detail or "{}")
    except ValueError:
        return None
    ack = doc.get(ACK) if isinstance(doc, dict) else None
    return ack if isinstance(ack, dict) else None


class HasId(Protocol):
    @property
    def id(self) -> str: ...


def ahead(engine: Engine, job: HasId, spend: SlotSpend | None) -> list[str]:
    """The chain links the ledger knows of for the job's slot and its database does not (a
    restore from before them); [] when there are none (no journal read without a chain)."""
    if spend is None or not has_chain(spend):
        return []
    have = known(engine, job.id)
    return [k for k, n in spend.counts().items() if n > have[k]]


def published_live(settings: Settings, spend: SlotSpend) -> dict[str, str] | None:
    """The editions the ledger recorded published for the slot, when the static sink still
    serves every one of them with the sha256 the ledger recorded; None otherwise (no static
    sink, nothing published, or a page missing or different)."""
    if settings.static_sink is None or not spend.published_editions:
        return None
    product, date = spend.slot.split("/", 1)
    root = Path(settings.static_sink.root)
    for lang, sha in spend.published_editions.items():
        revised = spend.revisions.get(lang)
        if revised is not None and revised[1] == "withdrawn":
            # Withdrawn since (`iipub withdraw`): the site serves the withdrawal's record instead.
            if withdrawn_sha256(root, product, date, lang) is None:
                return None
            continue
        if live_sha256(root, product, date, lang) != (revised[2] if revised is not None else sha):
            return None
    return dict(spend.published_editions)


def withdrawn_sha256(root: Path, product: str, date: str, lang: str) -> str | None:
    """The sha256 of the edition the static site records as withdrawn for this product, date and
    language (its `<lang>.json` is the withdrawal's record), or None."""
    try:
        doc = json.loads((root / json_path(product, date, lang)).read_bytes())
    except (OSError, ValueError):
        return None
    sha = doc.get("sha256") if isinstance(doc, dict) and doc.get("withdrawn") is True else None
    return sha if isinstance(sha, str) else None


def live_sha256(root: Path, product: str, date: str, lang: str) -> str | None:
    """The sha256 of the edition the static site serves for this product, date and language."""
    try:
        return artifact_from_json((root / json_path(product, date, lang)).read_bytes()).sha256
    except (OSError, ValueError):
        return None


def remedy(job: Job, spend: SlotSpend) -> str:
    """What an operator can do without paying again, in one sentence."""
    rid = spend.custody_response_id or spend.response_id
    ways = []
    if rid:
        ways.append(f"`iipub orphans adopt {rid} {job.id} --reason …` if its output was kept as an orphan")
    ways.append(f"`iipub jobs import-payload {job.id} FILE --reason …` with the output"
                + (f" (sha256 {spend.custody_sha256[:12]}…)" if spend.custody_sha256 else ""))
    ways.append(f"`iipub republish {job.id} --reason …` once its editions are saved again")
    # Output the ledger saw stored is evidence the payment authority weighs: buying again is explicit.
    release = "--verified-lost --pay-again" if spend.custody_sha256 or spend.published_editions else "--verified-lost"
    return "; ".join(ways) + (f"; `quarantine release {release}` pays again (charging the ledger's "
                              f"{spend.charged} paid create(s))")
