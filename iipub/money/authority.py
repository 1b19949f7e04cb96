"""The payment authority: the one rule that decides whether a slot may be paid for (pure).

Every path that charges `generation_attempts` or leads to a create asks it: the sweep right
before the create (`steps.step_create_eligible`), and up front every operator command that
would send a job back to CREATE_ELIGIBLE (`quarantine release --verified-lost`, single and
`--all`; `regenerate`), so the command refuses in one line instead of the sweep parking the
job afterwards. What it sees is collected by `paying.facts`:

    custody      output held for the slot: the job's stored payload, or a language track's
    ledger       this installation's spend ledger chain: output (custody, saved, published) the
                 database has forgotten (a restore)
    legacy       the legacy system's decisions file says it created or published the slot
    live         the live site serves every language still to publish, from another create
    languages    the configured languages still unpublished (none: a create buys nothing)
    config       the product's fingerprint changed since the job was made CREATE_ELIGIBLE (the
                 sweep re-plans the slot under the deployed configuration, journaled, and asks again)

A refusal names the evidence and a remedy that pays nothing. An operator who truly wants to buy
again says so (`--pay-again --reason`, journaled with the evidence it overrides): the sweep
then lets that job's create through once. Nothing overrides "nothing to buy" or a drifted config.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from iipub.money.spend import SlotSpend


class Evidence(enum.StrEnum):
    CUSTODY = "custody"
    LEDGER = "ledger"
    LEGACY = "legacy"
    LIVE = "live"
    LANGUAGES = "languages"
    CONFIG = "config"


# What `--pay-again` may override (the others are never worth paying for).
OVERRIDABLE = frozenset({Evidence.CUSTODY, Evidence.LEDGER, Evidence.LEGACY, Evidence.LIVE})


class Route(enum.StrEnum):
    """Who asks: the sweep before its create, or an operator command before it sends the job back."""

    SWEEP = "sweep"
    RELEASE = "release"  # quarantine release --verified-lost
    REGENERATE = "regenerate"  # the operator declared the held payload bad: it is not evidence
    # `correct --regenerate`: the operator declared public editions wrong; the output they came
    # from is not evidence, and the languages they replace (`Facts.replacing`) are what is bought.
    CORRECT = "correct"


@dataclass(frozen=True)
class Facts:
    job_id: str
    slot: str  # product/YYYY-MM-DD
    payload_sha256: str | None = None  # the slot's stored output
    track_payloads: Mapping[str, str] = field(default_factory=dict)  # lang -> sha256 of a track's held part
    saved: Sequence[str] = ()  # languages whose edition is saved or published
    ledger: SlotSpend | None = None  # this installation's chain for the slot
    ledger_ahead: Sequence[str] = ()  # chain links the ledger knows and the database does not
    legacy: Sequence[str] = ()  # the legacy system's actions for the slot (create, publish)
    live: Sequence[str] = ()  # languages the live site serves for the slot
    languages: Sequence[str] | None = None  # configured languages (None: the product is not configured)
    drift: tuple[str, str] | None = None  # (fingerprint recorded at CREATE_ELIGIBLE, deployed now) when they differ
    pay_again: str | None = None  # the operator's journaled reason to buy again
    # Languages whose saved edition an operator's `correct --regenerate` replaces: to buy again.
    replacing: Sequence[str] = ()
    # The database is behind this installation's ledger and the job was never parked for it: the
    # sweep's restore fence settles it before any create (adopting from the provider or the live
    # site, or parking it `restored_behind_ledger`), so an operator path may send it on.
    fence_pending: bool = False


@dataclass(frozen=True)
class Ruling:
    allowed: bool
    evidence: Evidence | None = None
    why: str = ""  # names the evidence
    remedy: str = ""  # what pays nothing
    overridden: tuple[str, ...] = ()  # evidence a pay-again let through

    def line(self) -> str:
        """The one-line refusal."""
        return f"{self.why}; {self.remedy}" if self.remedy else self.why

    def detail(self) -> dict[str, Any]:
        return {"evidence": self.evidence.value if self.evidence else None, "remedy": self.remedy}


ALLOWED = Ruling(True)


def unpublished(f: Facts) -> list[str]:
    """The configured languages a create could still give the slot."""
    return [lang for lang in (f.languages or ()) if lang not in f.saved or lang in f.replacing]


def may_pay(f: Facts, route: Route) -> Ruling:
    """Whether the slot of `f.job_id` may be paid for now, asked on `route`."""
    jid = f.job_id
    wanted = unpublished(f)
    if f.languages is not None and not wanted:
        return Ruling(False, Evidence.LANGUAGES,
                      f"job {jid}: every configured language of {f.slot} ({', '.join(f.languages)}) is saved or "
                      "published; a new create would buy nothing",
                      f"`iipub revalidate {jid} --lang L --reason …` re-checks a parked track for free")
    if route == Route.SWEEP and f.drift is not None:
        return Ruling(False, Evidence.CONFIG,
                      f"job {jid}: the product's configuration changed since the slot was made CREATE_ELIGIBLE "
                      f"(fingerprint {f.drift[0][:12]}… then, {f.drift[1][:12]}… now)",
                      f"`iipub quarantine release {jid} --verified-lost --reason …` creates under the deployed "
                      "configuration; roll the configuration back to create under the old one")
    if route != Route.SWEEP and f.fence_pending:
        return ALLOWED
    found: list[Ruling] = []
    held = dict(f.track_payloads)
    declared_bad = route in (Route.REGENERATE, Route.CORRECT)
    if f.payload_sha256 and not declared_bad:
        found.append(Ruling(False, Evidence.CUSTODY,
                            f"job {jid}: its output is in custody (payload sha256 {f.payload_sha256[:12]}…)",
                            f"`iipub revalidate {jid} --reason …` checks it again for free"))
    elif held and not declared_bad:
        found.append(Ruling(False, Evidence.CUSTODY,
                            f"job {jid}: its language tracks hold output ({', '.join(sorted(held))})",
                            f"`iipub revalidate {jid} --lang L --reason …` checks a parked track again for free"))
    output_links = [k for k in f.ledger_ahead if k in ("custody", "saved", "published")]
    if f.ledger is not None and output_links:
        rid = f.ledger.custody_response_id or f.ledger.response_id
        ways = ([f"`iipub orphans adopt {rid} {jid} --reason …` if its output was kept"] if rid else []) + [
            f"`iipub jobs import-payload {jid} FILE --reason …` with the output"]
        found.append(Ruling(False, Evidence.LEDGER,
                            f"job {jid}: this installation's spend ledger records {', '.join(output_links)} for "
                            f"{f.slot} (response {rid or '-'}) that the database has forgotten",
                            "; ".join(ways)))
    legacy = sorted(set(f.legacy) & {"create", "publish"})
    if legacy:
        found.append(Ruling(False, Evidence.LEGACY,
                            f"job {jid}: the legacy decisions file says the legacy system did {' and '.join(legacy)} "
                            f"{f.slot}",
                            "`iipub adopt FILE --reason …` takes its response over (product,edition_date,"
                            f"response_id), `iipub jobs import-payload {jid} FILE --reason …` its output, `iipub "
                            f"kill {jid} --reason …` leaves the slot to it"))
    live = [lang for lang in wanted if lang in f.live]
    if wanted and live == wanted:
        found.append(Ruling(False, Evidence.LIVE,
                            f"job {jid}: the live site already serves {f.slot} in {', '.join(live)}",
                            f"`iipub jobs import-payload {jid} FILE --reason …` with the output it came from, "
                            f"`iipub kill {jid} --reason …` keeps the pages"))
    if not found:
        return ALLOWED
    if f.pay_again:
        return Ruling(True, overridden=tuple(r.evidence.value for r in found if r.evidence))
    first = found[0]
    return Ruling(False, first.evidence, first.why,
                  first.remedy + "; or buy again on purpose: `--pay-again --reason …` (journaled)")
