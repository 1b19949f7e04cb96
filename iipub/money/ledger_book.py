"""What the database remembers of the spend ledger it writes to (the `ledger_book` row, migration
0011): the ledger's identity (`ledger_id`, written into the file as this installation's `open`
line) and its position (`base_spend_id`: every `spend` row after it is a dispatch whose intent
line followed that open line, unless the create was provably refused before it was sent).

So a ledger that is missing, replaced (no open line of this identity: another file, a copy from
elsewhere, a truncation before it), truncated or restored behind the database (fewer intent
lines since the open line than the dispatches the database recorded since) is noticed, not
guessed: new creates are held and `status --check` is CRITICAL until an operator accepts it
(`iipub ledger acknowledge --accept KIND`), which opens a new identity. With `[ledger]
mirror_path` both copies are checked, and a copy behind the other is the same problem. A database
behind its ledger (a restore) is the restore fence's (`restore`), as before.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iipub.core.errors import OperatorRefused
from iipub.money.ledger import LedgerError, SpendLedger
from iipub.money.spend import Fold
from iipub.store import db, gate_rows, ledger_rows, spend_rows
from iipub.store.handles import Connection, Engine

MISSING, REPLACED, BEHIND = "missing", "replaced", "behind"
KINDS = (MISSING, REPLACED, BEHIND)


@dataclass(frozen=True)
class Problem:
    kind: str  # missing | replaced | behind
    text: str  # one line: which copy, what the database expected, what the file holds

    def line(self) -> str:
        return (f"spend ledger {self.kind}: {self.text}; new creates are held until `iipub ledger acknowledge "
                f"--accept {self.kind} --reason …`")


@dataclass(frozen=True)
class Book:
    ledger_id: str
    path: str
    base_spend_id: int


def read_book(conn: Connection) -> Book | None:
    row = ledger_rows.read(conn)
    return Book(*row) if row is not None else None


def problem(engine: Engine | Connection, ledger: SpendLedger,
            fold: Callable[[], Fold | None] | None = None) -> Problem | None:
    """What is wrong with the ledger (and its mirror) against what the database remembers, or
    None. `fold` reads the primary copy (the tick's fresh view); it is called after the database
    was read, so the file (always written before the database records a create) is never older
    than the position it is compared with (two processes at once never see a false `behind`)."""
    if isinstance(engine, Connection):
        book, expected, paid = _position(engine)
    else:
        with engine.connect() as conn:  # closed before the file is read (on SQLite it holds the lock)
            book, expected, paid = _position(conn)
    return _problem(book, expected, paid, ledger, fold)


def _position(conn: Connection) -> tuple[Book | None, int, bool]:
    """What the database remembers: the ledger it opened, the paid creates it recorded since,
    and whether it recorded any at all."""
    book = read_book(conn)
    if book is None:
        return None, 0, spend_rows.max_id(conn) > 0
    return book, spend_rows.dispatches_since(conn, book.base_spend_id), True


def _problem(book: Book | None, expected: int, paid: bool, ledger: SpendLedger,
             fold: Callable[[], Fold | None] | None) -> Problem | None:
    if book is None:
        # Nothing remembered yet (`ensure_open` begins at the next create), unless creates were
        # paid (before 0011) and no copy of the ledger is left.
        if not ledger.exists() and paid:
            return Problem(MISSING, f"{ledger.path} does not exist and this database recorded paid creates")
        return None
    copies = [(ledger, fold)] + ([(ledger.copy(ledger.mirror), None)] if ledger.mirror is not None else [])
    seen: list[tuple[Path, int]] = []
    for copy, folded in copies:
        found = _check_copy(copy, folded, book, expected)
        if isinstance(found, Problem):
            return found
        seen.append((copy.path, found))
    if len(seen) == 2 and seen[0][1] != seen[1][1]:
        (behind_path, n), (ahead_path, m) = sorted(seen, key=lambda c: c[1])
        return Problem(BEHIND, f"{behind_path} holds {n} intent line(s) since ledger {book.ledger_id} was opened, "
                               f"its copy {ahead_path} {m}: restore the shorter copy from the longer one")
    return None


def _check_copy(copy: SpendLedger, fold: Callable[[], Fold | None] | None, book: Book,
                expected: int) -> Problem | int:
    if not copy.exists():
        return Problem(MISSING, f"{copy.path} does not exist (the database opened ledger {book.ledger_id} at "
                                f"{book.path} and recorded {expected} paid create(s) since)")
    try:
        folded = (fold() if fold is not None else None) or copy.fold()
    except (LedgerError, FileNotFoundError) as exc:
        return Problem(MISSING, f"{copy.path} cannot be read: {exc}")
    since = folded.intents_since(book.ledger_id)
    if since is None:
        return Problem(REPLACED, f"{copy.path} is not the ledger this database opened ({book.ledger_id} at "
                                 f"{book.path}): another file, or one truncated before its first line")
    if since < expected:
        return Problem(BEHIND, f"{copy.path} holds {since} intent line(s) since ledger {book.ledger_id} was opened; "
                               f"the database recorded {expected} paid create(s) since (truncated, or restored "
                               "from an older copy)")
    return since


def ensure_open(engine: Engine, ledger: SpendLedger) -> None:
    """Before the first create this database sends with a ledger it does not know yet: open it
    (an `open` line in the file, then the identity and position in the database; the line goes
    first, so a dispatch after the position read always writes its intent after the line)."""
    with engine.connect() as conn:
        if read_book(conn) is not None:
            return
    _open(engine, ledger, replace=False)


def _open(engine: Engine, ledger: SpendLedger, *, replace: bool) -> Book:
    ledger_id = "ledger_" + secrets.token_hex(12)
    ledger.open(ledger_id)  # in the file first: a database never names a ledger line that is not written
    row = ledger_rows.open_book(engine, ledger_id, str(ledger.path), replace=replace)
    assert row is not None
    return Book(*row)


def acknowledge(engine: Engine, ledger: SpendLedger, accept: str, by: str, reason: str, worker: str) -> str:
    """An operator accepts the ledger problem of kind `accept` (refused when the problem is
    another, or there is none): a new ledger identity is opened in the file and the database,
    and the acknowledgement is journaled (`gate_events`, kind `ledger_acknowledged`). Returns what
    was accepted, in one line."""
    if accept not in KINDS:
        raise OperatorRefused(f"--accept must be one of {', '.join(KINDS)}")
    found = problem(engine, ledger)
    if found is None:
        raise OperatorRefused("the spend ledger agrees with the database; nothing to acknowledge")
    if found.kind != accept:
        raise OperatorRefused(f"the spend ledger is {found.kind}, not {accept}: {found.text}")
    with engine.connect() as conn:
        old = read_book(conn)
        forgotten = spend_rows.dispatches_since(conn, old.base_spend_id) if old is not None else 0
    book = _open(engine, ledger, replace=True)
    accepted = (f"accepted: {found.text}. Ledger {book.ledger_id} opened at {ledger.path}; the paid creates this "
                f"database recorded before now are no longer all in the ledger: a database restored from before now "
                f"may pay for up to {forgotten} of them again")
    detail = {"accepted": accept, "problem": found.text, "old_ledger_id": old.ledger_id if old else None,
              "new_ledger_id": book.ledger_id, "by": by, "why": reason, "path": str(ledger.path)}
    with db.transaction(engine) as conn:
        gate_rows.record_event(conn, "ledger_acknowledged", worker[:128], json.dumps(detail, sort_keys=True))
    return accepted
