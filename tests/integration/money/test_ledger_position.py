"""`money.ledger_position`: the count of a spend ledger's intent lines kept beside the file
(`<ledger>.position`) is the count a whole read gives, after appends, after a restore of an older
copy (in place or as a new file), with a line half written, with lines of other installations;
a file with lines naming no installation, or a folder the reader may not write to, keeps no
position and is read whole. Real files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from iipub.money import ledger_position
from iipub.money.ledger import SpendLedger

INSTALLATION = "inst_a"


@pytest.fixture(autouse=True)
def _every_read_keeps_its_position(monkeypatch: pytest.MonkeyPatch) -> None:
    # The position is written after 64 KiB of new lines; these files are a few KiB.
    monkeypatch.setattr(ledger_position, "SAVE_AFTER_BYTES", 1)


def _write(ledger: SpendLedger, other: SpendLedger, day: int, intents: int = 3) -> None:
    for n in range(intents):
        slot = f"daily-brief/2026-11-{day:02d}"
        ledger.intent(f"job-{day}-{n}", slot, n + 1, "fp", "w")
        ledger.outcome(f"job-{day}-{n}", slot, n + 1, "accepted", f"resp_{day}_{n}")
        other.intent(f"other-{day}-{n}", slot, 1, "fp", "w")  # another installation, same file


def _ledgers(path: Path) -> tuple[SpendLedger, SpendLedger]:
    """This installation's ledger, opened as `ledger_1` with a first day of lines, and another
    installation's writing to the same file."""
    ours, other = SpendLedger(path, INSTALLATION), SpendLedger(path, "inst_b")
    ours.open("ledger_1")
    _write(ours, other, 1)
    return ours, other


def _same_as_a_whole_read(ledger: SpendLedger, ids: list[str]) -> ledger_position.Counted:
    counted = ledger_position.count(ledger)
    whole = ledger.fold()
    assert [counted.intents_since(i) for i in ids] == [whole.intents_since(i) for i in ids]
    return counted


def test_appended_lines_are_read_from_where_the_last_reader_stopped(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    ours, other = _ledgers(path)
    first = _same_as_a_whole_read(ours, ["ledger_1", "ledger_2"])
    assert isinstance(first, ledger_position.LedgerCount) and first.resumed_at == 0
    size = path.stat().st_size
    kept = json.loads(ledger_position.position_path(path).read_text())
    assert kept["offset"] == size and kept["intent_lines"] == 3 and kept["opens"] == {"ledger_1": 0}

    _write(ours, other, 2)
    ours.open("ledger_2")  # acknowledged: a new identity, counted from here
    _write(ours, other, 3)
    again = _same_as_a_whole_read(ours, ["ledger_1", "ledger_2"])
    assert isinstance(again, ledger_position.LedgerCount) and again.resumed_at == size
    assert (again.intents_since("ledger_1"), again.intents_since("ledger_2")) == (9, 3)
    assert again.intents_since("ledger_elsewhere") is None


@pytest.mark.parametrize("how", ["in_place", "new_file", "edited_tail", "edited_head"])
def test_a_restored_or_edited_file_is_read_again_from_its_first_byte(tmp_path: Path, how: str) -> None:
    path = tmp_path / "spend.jsonl"
    ours, other = _ledgers(path)
    backup = path.read_bytes()
    _write(ours, other, 2)
    assert ledger_position.count(ours).intents_since("ledger_1") == 6  # the position is at 6 intents
    if how == "in_place":  # the older copy written over the file: same inode, shorter
        path.write_bytes(backup)
    elif how == "new_file":  # the older copy, longer again by other lines, as a new file
        (tmp_path / "restored").write_bytes(backup + b'{"t": "torn')
        shutil.move(tmp_path / "restored", path)
    else:  # same length, one byte changed in the last or the first 4 KiB before the position
        data = bytearray(path.read_bytes())
        at = len(data) - 40 if how == "edited_tail" else 20
        data[at:at + 1] = b"X" if data[at:at + 1] != b"X" else b"Y"
        path.write_bytes(bytes(data))
    counted = _same_as_a_whole_read(ours, ["ledger_1"])
    assert isinstance(counted, ledger_position.LedgerCount) and counted.resumed_at == 0
    if how in ("in_place", "new_file"):
        assert counted.intents_since("ledger_1") == 3  # behind the database's 6: `ledger_book` says so


def test_a_line_still_being_written_is_counted_now_and_read_again_later(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    ours, _other = _ledgers(path)
    whole = path.read_bytes()
    line = json.dumps({"at": "2026-11-02T00:00:00Z", "installation": INSTALLATION, "t": "intent",
                       "job_id": "j", "slot": "daily-brief/2026-11-02", "attempt": 1, "fingerprint": "f",
                       "worker": "w"}, sort_keys=True)
    path.write_bytes(whole + line.encode())  # no newline yet
    assert _same_as_a_whole_read(ours, ["ledger_1"]).intents_since("ledger_1") == 4
    assert json.loads(ledger_position.position_path(path).read_text())["offset"] == len(whole)
    path.write_bytes(whole + line.encode() + b"\n")
    counted = _same_as_a_whole_read(ours, ["ledger_1"])
    assert isinstance(counted, ledger_position.LedgerCount) and counted.resumed_at == len(whole)


def test_lines_naming_no_installation_keep_no_position(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    SpendLedger(path).intent("old-job", "daily-brief/2026-10-01", 1, "fp", "w")  # before installations
    ours = SpendLedger(path, INSTALLATION, legacy_is_ours=lambda job, _rids: job == "old-job")
    ours.open("ledger_1")
    ours.intent("job", "daily-brief/2026-11-01", 1, "fp", "w")
    _same_as_a_whole_read(ours, ["ledger_1"])
    assert not ledger_position.position_path(path).exists()


def test_unnamed_lines_after_the_position_send_the_reader_back_to_the_first_byte(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    ours, _other = _ledgers(path)
    ledger_position.count(ours)
    SpendLedger(path).intent("stray", "daily-brief/2026-11-05", 1, "fp", "w")
    _same_as_a_whole_read(ours, ["ledger_1"])
    assert not ledger_position.position_path(path).exists()


def test_a_reader_that_may_not_write_beside_the_ledger_reads_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    ours, _other = _ledgers(path)
    ledger_position.position_path(path).mkdir()  # nothing can be written in its place
    for _ in range(2):
        counted = _same_as_a_whole_read(ours, ["ledger_1"])
        assert isinstance(counted, ledger_position.LedgerCount) and counted.resumed_at == 0
    assert sorted(tmp_path.iterdir()) == sorted([path, ledger_position.position_path(path)])  # no stray file


def test_a_whole_file_view_keeps_no_position(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    SpendLedger(path).intent("job", "daily-brief/2026-11-01", 1, "fp", "w")
    assert ledger_position.count(SpendLedger(path)).intents_since("x") is None
    assert not ledger_position.position_path(path).exists()
