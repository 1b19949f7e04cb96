"""What an operator can do for a parked job, as `iipub quarantine show` and `status` say it. Pure:
from the job's row (and the budget), the state of its output and the commands that apply to it,
each as it would be typed. `remedies` decides whether a command is allowed when it runs; this
module only lists the ones worth typing, so every parked job has at least one (`kill` at worst)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from iipub.model.jobs import Job
from iipub.model.states import (
    AMBIGUOUS_CREATE,
    EDITIONS_SAVED,
    KNOWN_BAD_OUTPUT,
    PAYLOAD_QUARANTINES,
    TRACK_PARKED,
    TRACK_SAVED,
    TRACKS_RUN_IN,
    Reason,
    State,
)

# What an operator cancel's explanation says when the provider still ran the response after it.
STILL_RUNNING_AFTER_CANCEL = "the response id is kept (release --resume-polling to watch it)"


@dataclass(frozen=True)
class Remedy:
    command: str  # as typed, with ID filled in
    effect: str  # one line: what it does, and whether it pays

    def public(self) -> dict[str, str]:
        return {"command": self.command, "effect": self.effect}


@dataclass(frozen=True)
class ParkedHelp:
    output: str  # where the job's output is: in custody, watched at the provider, or none
    remedies: tuple[Remedy, ...]  # each one runs from this state (tests/integration/operate/test_parked_remedies.py)
    not_now: tuple[str, ...] = ()  # what would help but cannot run now, and what unblocks it

    def public(self) -> dict[str, object]:
        return {"output": self.output, "remedies": [r.public() for r in self.remedies],
                "not_now": list(self.not_now)}


def output_line(job: Job, watch_seconds: float) -> str:
    """Where the job's output is, in one line (the custody watch's promise included)."""
    if job.payload is not None:
        return f"in custody (sha256 {job.payload_sha256}): safe, nothing is lost"
    if job.response_id and not job.kill_requested:
        return (f"response {job.response_id} is kept and watched: its output is stored when it finishes "
                f"(read every {watch_seconds:g} s whatever the poll budget); nothing is lost yet")
    if job.response_id:
        return f"response {job.response_id}: killed, its remote data is cancelled and deleted"
    return "none: no response is recorded for this job"


def of(job: Job, max_generation_attempts: int, watch_seconds: float,
       tracks: Mapping[str, State] | None = None, *, correcting: bool = False) -> ParkedHelp | None:
    """The output line and the remedies of a parked job (QUARANTINED, VALIDATION_FAILED_RETAINED,
    MANUALLY_SUSPENDED), or of a slot waiting on a parked language track (`tracks`: each
    language's state); None for a job that waits for nobody. `correcting`: the slot is a paid
    correction of published editions, so a release that pays names `--pay-again` (the payment
    authority refuses it otherwise: the ledger records the slot published)."""
    jid = job.id
    # `kill` only stops a slot before any of its editions is saved (it refuses otherwise).
    killable = job.effective_state not in EDITIONS_SAVED and not any(
        st in TRACK_SAVED for st in (tracks or {}).values())
    kill_remedy = Remedy(f"iipub kill {jid} --reason …", "give the edition up: it will not publish (nothing paid)")
    kill = [kill_remedy] if killable else []
    waiting = sorted(lang for lang, st in (tracks or {}).items() if st in TRACK_PARKED)
    if job.state in TRACKS_RUN_IN and waiting:
        saved = sorted(lang for lang, st in (tracks or {}).items() if st in TRACK_SAVED)
        per_lang = [Remedy(f"iipub revalidate {jid} --lang {lang} --reason …",
                           f"check the kept {lang} part again under the deployed rules (free)") for lang in waiting]
        unsaved = sorted(lang for lang in (tracks or {}) if lang not in saved)
        per_lang.append(Remedy(f"iipub regenerate {jid} --reason …",
                               f"a new paid generation for {', '.join(unsaved)} "
                               f"({job.generation_attempts}/{max_generation_attempts} used)"))
        return ParkedHelp(output_line(job, watch_seconds), tuple(per_lang + kill))
    if job.state == State.MANUALLY_SUSPENDED:
        back = job.suspended_from or "the state it was in"
        return ParkedHelp(output_line(job, watch_seconds), (
            Remedy(f"iipub resume {jid}", f"return it to {back} (nothing paid)"), *kill))
    budget_left = job.generation_attempts < max_generation_attempts
    again = " --pay-again" if correcting else ""
    paid = f"a new paid create ({job.generation_attempts}/{max_generation_attempts} used)"
    blocked = () if budget_left else (
        (f"a new paid create: all {max_generation_attempts} paid creates are used; raise [budgets] "
         "max_generation_attempts first, then `iipub quarantine show` lists it"),)

    def paying(*found: Remedy) -> list[Remedy]:
        return list(found) if budget_left else []

    if job.state == State.VALIDATION_FAILED_RETAINED:
        return ParkedHelp(output_line(job, watch_seconds), (
            Remedy(f"iipub revalidate {jid} --reason …", "validate the kept output again under the deployed rules "
                                                          "(free)"),
            *paying(Remedy(f"iipub regenerate {jid} --reason …", paid)), *kill), blocked)
    if job.state != State.QUARANTINED:
        return None
    found: list[Remedy] = []
    reason = job.quarantine_reason
    if job.payload is not None and reason in KNOWN_BAD_OUTPUT:
        # Validating it again parks it again: the kept output is known bad (cut at the cap, or a
        # refusal). It still counts as held, so the one way to pay again is an explicit regenerate.
        found += paying(Remedy(f"iipub regenerate {jid} --reason …",
                               f"declare the kept output bad and pay for a new generation, after fixing the cause "
                               f"(max_output_tokens, the prompt): {paid}"))
    elif job.payload is not None:
        if reason != Reason.EDITION_CONFLICT:
            found.append(Remedy(f"iipub revalidate {jid} --reason …",
                                "validate the stored output under the deployed rules and publish it if it passes "
                                "(free)"))
        if reason in PAYLOAD_QUARANTINES:
            found += paying(Remedy(f"iipub regenerate {jid} --reason …", paid))
    elif job.response_id:
        # A refused response read again is refused again; one an operator cancelled is watched again
        # only if the provider said it still ran after the cancel.
        cancelled = reason == Reason.OPERATOR_CANCELLED and STILL_RUNNING_AFTER_CANCEL not in (job.last_error or "")
        if reason not in KNOWN_BAD_OUTPUT and not cancelled:
            found.append(Remedy(f"iipub quarantine release {jid} --resume-polling --reason …",
                                f"poll response {job.response_id} again with a fresh poll budget (free)"))
            found.append(Remedy(f"iipub jobs import-payload {jid} FILE --reason …",
                                "store output recovered from the provider's dashboard (free)"))
        found += paying(Remedy(f"iipub quarantine release {jid} --verified-lost{again} --reason …",
                               f"only once the response is verified gone (or its refusal fixed): {paid}"))
    else:
        if reason in AMBIGUOUS_CREATE:
            found.append(Remedy(f"iipub quarantine release {jid} --link RESP_ID --reason …",
                                "adopt the response the create made, found in the provider's dashboard (free)"))
        found += paying(Remedy(f"iipub quarantine release {jid} --verified-lost{again} --reason …", paid))
    found += kill
    return ParkedHelp(output_line(job, watch_seconds), tuple(found), blocked)
