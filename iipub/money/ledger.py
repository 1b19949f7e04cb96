"""The spend ledger: an append-only, fsync'd file outside the database that remembers the whole
chain of every paid create, so a database restored from a backup cannot make iipub pay for a
slot again, nor lose track of what it already published.

One JSON line per link of the chain, all keyed by slot (`product/YYYY-MM-DD`):

    intent     before the POST: job, attempt, config fingerprint (fsync'd, or nothing is sent)
    outcome    after it: accepted (with the response id), refused, ambiguous or rejected
    custody    the output was stored: response id and the payload's sha256
    saved      editions were saved: their sha256 per language
    published  every event was delivered: the editions' sha256 per language
    killed     an operator killed the job: its response may go without custody
    revised    an operator withdrew or corrected a published edition: language, revision, kind
               and sha256 (so a restored database never reuses a revision the live site has)

The chain lines after `intent` are written after the database committed the step, so in
normal operation the ledger never knows more than the database; after a restore it does
(`iipub.money.restore`). A line is written with one `write` on a file opened for appending, checked
to be whole and fsync'd; a short write (disk full) is an error, and the next line starts on a
fresh line, so a torn line costs only itself. `spend.summarize` folds the lines into `SlotSpend`.

Every line names the installation that wrote it (`installation`, the database's installation
id): two databases may write to one file and each reads only its own chain (`spend.Fold`).
Lines from before that (no `installation`) count for this installation only when their job or
response is known to its database; otherwise they are someone else's, noted once and ignored.

`iipub adopt` writes one `adopted` line per response it takes over from a legacy system: the
creates that system already paid for the slot (`attempt`), charged to the slot like iipub's own,
but not paid by iipub.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import mmap
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from iipub.core.errors import IipubError
from iipub.core.timefmt import iso_z
from iipub.money.spend import (
    CHAIN,
    Fold,
    LegacyOwner,
    SlotSpend,
    behind,
    composed_editions,
    has_chain,
    slot_of,
    summarize,
)

__all__ = ["CHAIN", "Fold", "LedgerError", "SlotSpend", "SpendLedger", "behind", "composed_editions",
           "has_chain", "slot_of",
           "summarize", "writes_through"]

# The one write of a line; `writes_through` is its test seam.
_write: Callable[[int, bytes], int] = os.write


@contextmanager
def writes_through(write: Callable[[int, bytes], int]) -> Iterator[None]:
    """The test seam for the ledger's writes (fault injection): inside the block every line goes
    through `write(fd, data)` instead of `os.write`, so a test can make it short or fail as a disk
    that fills mid-line does, which no file a test can make does to one process alone. Production
    never calls it."""
    global _write
    saved, _write = _write, write
    try:
        yield
    finally:
        _write = saved


class LedgerError(IipubError):
    """The spend ledger cannot be written or read; no paid create is sent without it."""

    exit_code = 74  # EX_IOERR


class SpendLedger:
    """The ledger file as one installation writes and reads it (`installation` None: every line,
    written without a name, as tests of the file itself do)."""

    def __init__(self, path: Path, installation: str | None = None,
                 legacy_is_ours: LegacyOwner | None = None, mirror: Path | None = None) -> None:
        self.path = Path(path)
        self.installation = installation
        self.legacy_is_ours = legacy_is_ours
        self.mirror = Path(mirror) if mirror is not None else None  # a second copy, written first

    def copy(self, path: Path) -> SpendLedger:
        """The same installation's view of another copy of the ledger (the mirror)."""
        return SpendLedger(path, self.installation, self.legacy_is_ours)

    def open(self, ledger_id: str) -> None:
        """This installation begins (or begins again) writing to the ledger as `ledger_id`."""
        self._append({"t": "open", "ledger_id": ledger_id, "slot": "", "attempt": 0})

    def intent(self, job_id: str, slot: str, attempt: int, fingerprint: str, worker: str) -> None:
        """Before a paid create: raises LedgerError if the line cannot be made durable."""
        self._append({"t": "intent", "job_id": job_id, "slot": slot, "attempt": attempt,
                      "fingerprint": fingerprint, "worker": worker})

    def outcome(self, job_id: str, slot: str, attempt: int, outcome: str, response_id: str | None) -> None:
        self._append({"t": "outcome", "job_id": job_id, "slot": slot, "attempt": attempt, "outcome": outcome,
                      "response_id": response_id})

    def adopted(self, job_id: str, slot: str, attempts: int, response_id: str, worker: str) -> None:
        """A response a legacy system paid for (`attempts` creates), taken over by the slot's job."""
        self._append({"t": "adopted", "job_id": job_id, "slot": slot, "attempt": attempts,
                      "response_id": response_id, "worker": worker})

    def custody(self, job_id: str, slot: str, attempt: int, response_id: str | None,
                payload_sha256: str | None) -> None:
        self._append({"t": "custody", "job_id": job_id, "slot": slot, "attempt": attempt,
                      "response_id": response_id, "payload_sha256": payload_sha256})

    def saved(self, job_id: str, slot: str, attempt: int, editions: Mapping[str, str]) -> None:
        self._append({"t": "saved", "job_id": job_id, "slot": slot, "attempt": attempt, "editions": dict(editions)})

    def published(self, job_id: str, slot: str, attempt: int, response_id: str | None,
                  editions: Mapping[str, str]) -> None:
        self._append({"t": "published", "job_id": job_id, "slot": slot, "attempt": attempt,
                      "response_id": response_id, "editions": dict(editions)})

    def killed(self, job_id: str, slot: str, attempt: int, response_id: str) -> None:
        """An operator killed the job: its response may be deleted without custody."""
        self._append({"t": "killed", "job_id": job_id, "slot": slot, "attempt": attempt, "response_id": response_id})

    def revised(self, job_id: str, slot: str, attempt: int, lang: str, revision: int, kind: str,
                sha256: str, event_id: str) -> None:
        """An edition withdrawn (`sha256`: the edition taken back) or corrected (the correction's)."""
        self._append({"t": "revised", "job_id": job_id, "slot": slot, "attempt": attempt, "lang": lang,
                      "revision": revision, "kind": kind, "sha256": sha256, "event_id": event_id})

    def exists(self) -> bool:
        return self.path.is_file()

    def read(self) -> tuple[dict[str, SlotSpend], int]:
        """Per-slot spend and the number of lines that could not be read (a missing file is
        empty: `exists` tells the two apart). Raises LedgerError if the file cannot be read."""
        try:
            fold = self.fold()
        except FileNotFoundError:
            return {}, 0
        return fold.slots, fold.bad

    def spend_of(self, slot: str) -> SlotSpend | None:
        """This installation's lines of `slot` folded, as the file is now: only the lines that name
        the slot are parsed (a slot's spend depends on its own lines alone), so a ledger of years
        costs a byte search, not a parse of every line. Raises LedgerError if it cannot be read."""
        fold = Fold(self.installation, self.legacy_is_ours)
        fold.feed(self._lines_naming(slot))
        return fold.slots.get(slot)

    def names_response(self, response_id: str) -> bool:
        """Whether this installation's lines name `response_id` (an accepted create's answer, its
        custody or its publication), as the file is now."""
        fold = Fold(self.installation, self.legacy_is_ours)
        fold.feed(self._lines_naming(response_id))
        return response_id in fold.response_ids

    def _lines_naming(self, text: str) -> list[str]:
        """The whole lines that contain `text` as the writer encodes it (a missing file: none)."""
        needle = json.dumps(text)[1:-1].encode("utf-8")
        found: list[str] = []
        try:
            with self.path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if not size or not needle:
                    return found
                with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
                    at = m.find(needle)
                    while at != -1:
                        start, end = m.rfind(b"\n", 0, at) + 1, m.find(b"\n", at)
                        end = size if end == -1 else end
                        found.append(m[start:end].decode("utf-8", errors="replace"))
                        at = m.find(needle, end)
        except FileNotFoundError:
            return found
        except (OSError, ValueError) as exc:
            raise LedgerError(f"cannot read the spend ledger {self.path}: {exc}") from None
        return found

    def fold(self) -> Fold:
        """This installation's lines folded (FileNotFoundError when there is no file)."""
        fold = Fold(self.installation, self.legacy_is_ours)
        try:
            with self.path.open(encoding="utf-8", errors="replace") as f:
                fold.feed(f)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise LedgerError(f"cannot read the spend ledger {self.path}: {exc.strerror or exc}") from None
        return fold

    def load(self) -> tuple[dict[str, SlotSpend], int, str | None]:
        """`read`, with a missing or unreadable file as a reason instead of an empty ledger or an
        error: (spend, unreadable lines, why the ledger could not be read or None)."""
        if not self.path.exists():
            return {}, 0, f"the spend ledger {self.path} does not exist"
        try:
            spend, bad = self.read()
        except LedgerError as exc:
            return {}, 0, str(exc)
        return spend, bad, None

    def load_fold(self) -> tuple[Fold, str | None]:
        """`fold`, with a missing or unreadable file as a reason instead of an error."""
        if not self.path.exists():
            return Fold(self.installation), f"the spend ledger {self.path} does not exist"
        try:
            return self.fold(), None
        except (LedgerError, FileNotFoundError) as exc:
            return Fold(self.installation), str(exc)

    def _append(self, record: Mapping[str, Any]) -> None:
        named = {"installation": self.installation} if self.installation else {}
        line = (json.dumps({"at": iso_z(dt.datetime.now(dt.UTC)), **named, **record}, sort_keys=True)
                + "\n").encode("utf-8")
        # The mirror first (on another file system): a line is never only in the copy a restore
        # of the host takes back with the database. A mirror not started yet (just configured)
        # begins as a whole copy of the primary, so the two agree from its first line.
        if self.mirror is not None and not self.mirror.exists() and self.path.is_file():
            _start_mirror(self.path, self.mirror)
        for path in ([self.mirror] if self.mirror is not None else []) + [self.path]:
            _append_line(path, line)


def _start_mirror(primary: Path, mirror: Path) -> None:
    """Copy the primary to a mirror that does not exist yet: written and fsync'd under a temporary
    name, then linked into place (a second process starting it at the same time finds it there
    and appends to it instead: nothing it wrote is replaced)."""
    tmp = mirror.with_name(f".{mirror.name}.{os.getpid()}.start")
    try:
        mirror.parent.mkdir(parents=True, exist_ok=True)
        with primary.open("rb") as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, mirror)
    except OSError as exc:
        raise LedgerError(f"cannot start the spend ledger's mirror {mirror}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _append_line(path: Path, line: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # the last line is torn: this one starts on a line of its own
            written = _write(fd, line)
            if written != len(line):
                raise LedgerError(f"cannot write the spend ledger {path}: short write ({written} of "
                                  f"{len(line)} bytes; is the disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise LedgerError(f"cannot write the spend ledger {path}: {exc.strerror or exc}") from None
