"""How many intent lines this installation wrote to a spend ledger copy since each of its `open`
lines, counted without reading the whole file every minute.

`status`, `status --prometheus` and a creating tick compare that count with the paid creates the
database recorded (`ledger_book.problem`). The file grows by a few lines a slot for as long as the
installation lives: ten years of twenty products is about 50 MB, two seconds of CPU to fold. So
the count is kept beside the file (`<ledger>.position`): the byte offset it reached, the file's
identity (device and inode), digests of its first and last 4 KiB before that offset, and the
counts. The next reader checks all of them against the file and reads only what was appended
since; a file replaced, shortened or rewritten (a restore, an edit) fails the check and is counted
again from its first byte, as before. Lines naming no installation (written before lines named
one) are counted only from the first byte, with the database's say on which are ours: such a file
keeps no position. The position is a cache: deleting it costs one full read, and a reader that
may not write beside the ledger just reads the whole file."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from iipub.money.ledger import LedgerError, SpendLedger
from iipub.money.spend import Fold

SUFFIX = ".position"
VERSION = 1
WINDOW = 4096  # bytes digested at the start of the file and right before the offset
SAVE_AFTER_BYTES = 64 * 1024  # a position is written again once this much more was counted


class Counted(Protocol):
    """What `ledger_book` asks of a ledger copy: its intent lines since an `open` line; and what a
    run reports of it: lines that could not be read, old lines that are another installation's."""

    bad: int
    foreign_legacy: int

    def intents_since(self, ledger_id: str) -> int | None: ...


@dataclass
class LedgerCount:
    """This installation's intent lines, and how many of them came before each `open` line."""

    opens: dict[str, int] = field(default_factory=dict)
    intent_lines: int = 0
    resumed_at: int = 0  # the byte offset this count was read from (0: the whole file)
    bad: int = 0  # lines that could not be read (torn, damaged)
    foreign_legacy: int = 0  # old lines naming no installation that this database does not know

    def intents_since(self, ledger_id: str) -> int | None:
        before = self.opens.get(ledger_id)
        return None if before is None else self.intent_lines - before

    def add(self, fold: Fold) -> None:
        """`fold`, read after this count's lines, added to it (the first `open` of an id wins)."""
        for ledger_id, before in fold.opens.items():
            self.opens.setdefault(ledger_id, self.intent_lines + before)
        self.intent_lines += fold.intent_lines
        self.bad += fold.bad
        self.foreign_legacy += fold.foreign_legacy


def position_path(ledger_path: Path) -> Path:
    return ledger_path.with_name(ledger_path.name + SUFFIX)


def count(ledger: SpendLedger) -> Counted:
    """The copy's count (raises FileNotFoundError or LedgerError as `SpendLedger.fold` does)."""
    if ledger.installation is None:
        return ledger.fold()  # a whole-file view keeps no position
    path = ledger.path
    try:
        with path.open("rb") as f:
            st = os.fstat(f.fileno())
            identity = (st.st_dev, st.st_ino)
            saved = _saved(path, ledger.installation, identity, st.st_size, f)
            start = saved.resumed_at if saved is not None else 0
            f.seek(start)
            data = f.read()
            whole = data.rfind(b"\n") + 1
            fold = Fold(ledger.installation, ledger.legacy_is_ours if saved is None else None)
            fold.feed(data[:whole].decode("utf-8", errors="replace").splitlines())
            if saved is not None and fold.unnamed:
                # Unnamed lines after the position: only a read from the first byte decides whose they are.
                with contextlib.suppress(OSError):
                    position_path(path).unlink()
                return ledger.fold()
            result = saved or LedgerCount()
            result.add(fold)
            if not fold.unnamed and whole >= SAVE_AFTER_BYTES:
                _save(path, f, ledger.installation, identity, start + whole, result)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise LedgerError(f"cannot read the spend ledger {path}: {exc.strerror or exc}") from None
    if whole < len(data):  # a line still being written (or torn): counted now, not kept
        tail = Fold(ledger.installation, None)
        tail.feed(data[whole:].decode("utf-8", errors="replace").splitlines())
        result.add(tail)
    result.resumed_at = start
    return result


def _saved(path: Path, installation: str, identity: tuple[int, int], size: int, f: BinaryIO) -> LedgerCount | None:
    """The position kept beside `path`, when it still describes the start of this very file."""
    try:
        doc = json.loads(position_path(path).read_text(encoding="utf-8"))
        offset = int(doc["offset"])
        if (doc.get("version") != VERSION or doc.get("installation") != installation
                or tuple(doc["file"]) != identity or not 0 < offset <= size):
            return None
        if doc["head"] != _digest(f, 0, min(WINDOW, offset)) or doc["tail"] != _digest(f, max(0, offset - WINDOW),
                                                                                         offset):
            return None
        opens = {str(k): int(v) for k, v in dict(doc["opens"]).items()}
        return LedgerCount(opens, int(doc["intent_lines"]), offset, int(doc["bad"]), int(doc["foreign_legacy"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(path: Path, f: BinaryIO, installation: str, identity: tuple[int, int], offset: int,
          counted: LedgerCount) -> None:
    """Write the position, its digests read from `f` (the ledger as just counted), as a new file
    renamed over the old: a reader sees one or the other. A folder this process may not write to
    keeps no position: the next reader reads it all."""
    target = position_path(path)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    doc: dict[str, Any] = {"version": VERSION, "installation": installation, "file": list(identity),
                           "offset": offset, "head": _digest(f, 0, min(WINDOW, offset)),
                           "tail": _digest(f, max(0, offset - WINDOW), offset),
                           "opens": counted.opens, "intent_lines": counted.intent_lines,
                           "bad": counted.bad, "foreign_legacy": counted.foreign_legacy}
    try:
        temporary.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
        os.replace(temporary, target)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()


def _digest(f: BinaryIO, start: int, end: int) -> str:
    f.seek(start)
    return hashlib.sha256(f.read(end - start)).hexdigest()
