"""The spend ledger's writer and reader on real files: whole lines or an error, a torn line
skipped and counted without costing the line after it, and the chain folded per slot."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from iipub.money import ledger
from iipub.money.ledger import Fold, LedgerError, SpendLedger

SLOT = "daily-brief/2026-11-29"


def test_a_short_write_is_an_error_and_the_next_line_starts_on_a_line_of_its_own(tmp_path: Path) -> None:
    book = SpendLedger(tmp_path / "spend-ledger.jsonl")
    book.intent("job-1", SLOT, 1, "fp", "w")
    # A disk that fills in the middle of a line: no file a test can make does that to one process's
    # write(2) without doing it to every file of the process (the RLIMIT_FSIZE drill in
    # tests/integration/money/test_ledger.py runs in a process of its own), so the ledger's one write
    # is replaced through the module's test seam.
    def disk_full(fd: int, data: bytes) -> int:  # what write(2) does when the disk fills mid-line
        return os.write(fd, data[: len(data) // 2])

    with ledger.writes_through(disk_full), pytest.raises(LedgerError, match="short write"):
        book.outcome("job-1", SLOT, 1, "accepted", "resp_1")
    assert not book.path.read_bytes().endswith(b"\n")  # the torn half-line is on disk
    book.intent("job-2", "daily-brief/2026-11-30", 1, "fp", "w")  # the disk has room again
    lines = book.path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and lines[-2].startswith(b'{"at"')  # the new line stands alone
    spend, bad = book.read()
    assert bad == 1  # the torn line, reported
    assert spend[SLOT].charged == 1 and spend[SLOT].open_intent and spend[SLOT].response_id is None
    assert spend["daily-brief/2026-11-30"].charged == 1  # the line after the torn one is not lost


def test_an_error_from_write_or_fsync_is_a_ledger_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    book = SpendLedger(tmp_path / "spend-ledger.jsonl")

    # The file system's errors (ENOSPC from write, EIO from fsync), injected where the ledger meets
    # the operating system: a test cannot make a real disk fail on cue.
    def no_space(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    with ledger.writes_through(no_space), pytest.raises(LedgerError, match="No space left on device"):
        book.intent("job-1", SLOT, 1, "fp", "w")

    def fsync_fails(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync_fails)
    with pytest.raises(LedgerError, match="Input/output error"):
        book.intent("job-1", SLOT, 1, "fp", "w")


def test_the_chain_is_folded_per_slot(tmp_path: Path) -> None:
    book = SpendLedger(tmp_path / "spend-ledger.jsonl")
    book.intent("job-1", SLOT, 1, "fp", "w")
    book.outcome("job-1", SLOT, 1, "accepted", "resp_1")
    book.custody("job-1", SLOT, 1, "resp_1", "a" * 64)
    book.saved("job-1", SLOT, 1, {"en": "b" * 64, "fr": "c" * 64})
    book.published("job-1", SLOT, 1, "resp_1", {"en": "b" * 64, "fr": "c" * 64})
    book.killed("job-1", SLOT, 1, "resp_1")
    spend, bad = book.read()
    s = spend[SLOT]
    assert bad == 0 and s.charged == 1 and s.response_id == "resp_1" and not s.open_intent
    assert s.counts() == {"custody": 1, "saved": 1, "published": 1} and ledger.has_chain(s)
    assert s.custody_sha256 == "a" * 64 and s.custody_response_id == "resp_1"
    assert s.published_editions == {"en": "b" * 64, "fr": "c" * 64} == s.saved_editions
    assert s.evidence()["responses"] == ["resp_1"]
    assert s.custody_ids == ["resp_1"] == s.killed_ids and s.intents == {"1": 1}


def test_a_missing_or_unreadable_ledger_is_said_so(tmp_path: Path) -> None:
    missing = SpendLedger(tmp_path / "nowhere" / "spend-ledger.jsonl")
    assert missing.load()[2] is not None and "does not exist" in (missing.load()[2] or "")
    folder = SpendLedger(tmp_path)  # a directory where the file should be
    spend, bad, why = folder.load()
    assert (spend, bad) == ({}, 0) and why is not None and "cannot read" in why


def _line(**rec: object) -> str:
    return json.dumps(rec) + "\n"


def test_a_fold_counts_only_its_installations_lines_and_claims_old_lines_it_knows() -> None:
    lines = [
        _line(t="intent", job_id="old-mine", slot="p/2026-01-01", attempt=1, fingerprint="f"),
        _line(t="outcome", job_id="old-mine", slot="p/2026-01-01", attempt=1, outcome="accepted", response_id="r1"),
        _line(t="intent", job_id="old-theirs", slot="p/2026-01-02", attempt=1, fingerprint="f"),
        _line(t="outcome", job_id="old-theirs", slot="p/2026-01-02", attempt=1, outcome="accepted",
              response_id="r9"),
        _line(t="intent", job_id="j2", slot="p/2026-01-02", attempt=1, fingerprint="f", installation="inst_a"),
        _line(t="intent", job_id="k2", slot="p/2026-01-02", attempt=1, fingerprint="f", installation="inst_b"),
        _line(t="intent", job_id="k3", slot="p/2026-01-03", attempt=1, fingerprint="f", installation="inst_b"),
    ]
    asked: list[tuple[str, frozenset[str]]] = []

    def ours(job_id: str, responses: frozenset[str]) -> bool:
        asked.append((job_id, responses))
        return job_id == "old-mine"

    fold = Fold("inst_a", ours)
    fold.feed(lines)
    assert sorted(fold.slots) == ["p/2026-01-01", "p/2026-01-02"]
    assert fold.slots["p/2026-01-01"].response_id == "r1"
    assert fold.slots["p/2026-01-02"].charged == 1 and fold.slots["p/2026-01-02"].job_ids == ["j2"]
    assert (fold.foreign, fold.foreign_legacy, fold.lines) == (2, 2, 3)
    assert ("old-theirs", frozenset({"r9"})) in asked
    assert "r1" in fold.response_ids and "r9" not in fold.response_ids
    everything = Fold()  # no installation: the whole file, as before lines were named
    everything.feed(lines)
    assert everything.slots["p/2026-01-02"].charged == 3


def test_a_slots_spend_is_read_afresh_from_its_own_lines_and_from_a_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "spend-ledger.jsonl"
    book = SpendLedger(path, "inst_a")
    assert book.spend_of("p/2026-01-01") is None and not book.names_response("r1")  # no file yet
    book.intent("j", "p/2026-01-01", 1, "f", "w")
    SpendLedger(path, "inst_b").intent("k", "p/2026-01-01", 1, "f", "w")  # another installation's
    assert book.spend_of("p/2026-01-01").charged == 1  # type: ignore[union-attr]
    book.outcome("j", "p/2026-01-01", 1, "refused", None)
    assert book.spend_of("p/2026-01-01").charged == 0  # type: ignore[union-attr]  # fresh: the refund is seen
    book.intent("j2", "p/2026-01-02", 1, "f", "w")
    book.outcome("j2", "p/2026-01-02", 1, "accepted", "r1")
    assert book.names_response("r1") and not book.names_response("r2")
    with path.open("a") as f:
        f.write('{"t": "intent", "job_id": "j", "slot": "p/2026-01-01"')  # a line still being written
    assert book.spend_of("p/2026-01-01").charged == 0  # type: ignore[union-attr]
    replaced = tmp_path / "other.jsonl"
    SpendLedger(replaced, "inst_a").intent("j", "p/2026-01-09", 1, "f", "w")
    replaced.replace(path)
    assert book.spend_of("p/2026-01-01") is None and book.spend_of("p/2026-01-09").charged == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", range(12))
def test_a_slots_own_lines_fold_to_what_the_whole_file_says_of_it(tmp_path: Path, seed: int) -> None:
    """`spend_of` and `names_response` parse only the lines naming the slot or the response; on
    ledgers of every kind of line, two installations, old unnamed lines and torn ones, they agree
    with a fold of the whole file for every slot and every response."""
    rng = random.Random(seed)
    path = tmp_path / "spend-ledger.jsonl"
    ours = SpendLedger(path, "inst_a", legacy_is_ours=lambda job, _rids: job.endswith("0"))
    writers = [ours, SpendLedger(path, "inst_b"), SpendLedger(path)]  # another installation; old lines
    slots = [f"p{p}/2026-01-{d:02d}" for p in range(3) for d in range(1, 5)]
    responses: list[str] = []
    ours.open("ledger_1")
    for n in range(rng.randint(20, 80)):
        book, slot, attempt = rng.choice(writers), rng.choice(slots), rng.randint(1, 3)
        job, rid = f"job-{slot}-{rng.randint(0, 3)}", f"resp_{n}"
        kind = rng.choice(["intent", "outcome", "custody", "saved", "published", "killed", "revised", "adopted"])
        if kind == "intent":
            book.intent(job, slot, attempt, "fp", "w")
        elif kind == "outcome":
            book.outcome(job, slot, attempt, rng.choice(["accepted", "refused", "ambiguous", "rejected"]), rid)
        elif kind == "custody":
            book.custody(job, slot, attempt, rid, "c" * 64)
        elif kind == "saved":
            book.saved(job, slot, attempt, {"en": "a" * 64})
        elif kind == "published":
            book.published(job, slot, attempt, rid, {"en": "a" * 64, "es": "b" * 64})
        elif kind == "killed":
            book.killed(job, slot, attempt, rid)
        elif kind == "revised":
            book.revised(job, slot, attempt, "en", rng.randint(2, 4), "corrected", "d" * 64, f"ev{n}")
        else:
            book.adopted(job, slot, attempt, rid, "w")
        responses.append(rid)
        if rng.random() < 0.05:
            with path.open("a") as f:
                f.write('{"t": "intent", "slot": "' + slot + '", "job_id": "torn"\n')  # a torn line
    whole = ours.fold()
    assert whole.slots  # the comparison is not vacuous
    for slot in [*slots, "p9/2026-01-01"]:
        assert ours.spend_of(slot) == whole.slots.get(slot), slot
    for rid in [*responses, "resp_none"]:
        assert ours.names_response(rid) == (rid in whole.response_ids), rid
