"""What the database remembers of the spend ledgers it writes to (the `ledger_book` rows,
migrations 0011 and 0016): each ledger's identity (`ledger_id`, written into the file as this
installation's `open` line) and position (the paid creates whose intent line went to it: the
`spend` rows tagged with its id, and for the row from before 0016 every one after `base_spend_id`).

Several hosts may each write their own ledger (docs/scale-out.md): the database knows each as such,
one row per ledger, found by the host and the ledger's path, or by the open line its file holds (a
file moved with its installation; one file shared by every host is one ledger). A host's ledger is
compared with that host's paid creates only, so a second host's ledger is neither "replaced" nor
"behind", and acknowledging one host's ledger changes nothing for another.

So a ledger that is missing, replaced (no open line of its identity: another file, a copy from
elsewhere, a truncation before it), truncated or restored behind the database (fewer intent lines
since the open line than the paid creates the database recorded for it) is noticed, not guessed:
new creates are held and `status --check` is CRITICAL until an operator accepts it (`iipub ledger
acknowledge --accept KIND`), which opens a new identity for that ledger. With `[ledger]
mirror_path` both copies are checked, and a copy behind the other is the same problem; a mirror
that does not exist yet is started as a copy of the primary by the next line written
(`ledger.SpendLedger`), so adding one holds nothing. A database behind its ledger (a restore) is
the restore fence's (`restore`), as before.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from iipub.core.errors import OperatorRefused
from iipub.money import ledger_position
from iipub.money.ledger import LedgerError, SpendLedger
from iipub.money.ledger_position import Counted
from iipub.store import db, gate_rows, ledger_rows, spend_rows
from iipub.store.handles import Connection, Engine
from iipub.store.ledger_rows import BookRow

MISSING, REPLACED, BEHIND = "missing", "replaced", "behind"
KINDS = (MISSING, REPLACED, BEHIND)


@dataclass(frozen=True)
class Problem:
    kind: str  # missing | replaced | behind
    text: str  # one line: which copy, what the database expected, what the file holds

    def line(self) -> str:
        return (f"spend ledger {self.kind}: {self.text}; new creates are held until `iipub ledger acknowledge "
                f"--accept {self.kind} --reason …`")


Book = BookRow  # one ledger as the database remembers it


def where(ledger: SpendLedger) -> tuple[str, str]:
    """This process's host and the ledger's resolved path: the key of its row."""
    return socket.gethostname(), os.path.realpath(ledger.path)


def books(conn: Connection) -> list[Book]:
    return ledger_rows.read_all(conn)


def read_book(conn: Connection, ledger: SpendLedger) -> Book | None:
    """The row of `ledger` as far as the database alone tells (its host and path); `mine` also
    reads the file."""
    return mine(books(conn), ledger, None)


def mine(rows: list[Book], ledger: SpendLedger, fold: Counted | None) -> Book | None:
    """Which remembered ledger `ledger` is: the row of this host and path; else the one whose
    open line the file holds (the file moved, or one file shared by several hosts); else the row
    from before 0016 at this path, not claimed by another host (then the file is missing or
    replaced). None: a ledger the database does not know yet."""
    host, path = where(ledger)
    key = ledger_rows.key_of(host, path)
    for row in rows:
        if row.name == key:
            return row
    if fold is not None:
        held = [r for r in rows if fold.intents_since(r.ledger_id) is not None]
        if held:
            return next((r for r in reversed(held) if r.host in (None, host)), held[-1])
    for row in rows:
        if row.name == ledger_rows.LEGACY and row.host in (None, host) and os.path.realpath(row.path) == path:
            return row
    return None


def problem(engine: Engine | Connection, ledger: SpendLedger,
            fold: Callable[[], Counted | None] | None = None) -> Problem | None:
    """What is wrong with the ledger (and its mirror) against what the database remembers, or
    None. `fold` reads the primary copy (the tick's fresh view); it is called after the database
    was read, so the file (always written before the database records a create) is never older
    than the position it is compared with (two processes at once never see a false `behind`)."""
    if isinstance(engine, Connection):
        rows, expected, paid = _position(engine)
    else:
        with engine.connect() as conn:  # closed before the file is read (on SQLite it holds the lock)
            rows, expected, paid = _position(conn)
    return _problem(rows, expected, paid, ledger, fold)


def _position(conn: Connection) -> tuple[list[Book], dict[str, int], bool]:
    """What the database remembers: the ledgers it opened, the paid creates it recorded for each,
    and whether it recorded any at all."""
    rows = books(conn)
    return rows, {r.name: ledger_rows.dispatches_of(conn, r) for r in rows}, spend_rows.max_id(conn) > 0


def _read_primary(ledger: SpendLedger, fold: Callable[[], Counted | None] | None) -> Counted | None:
    if not ledger.exists():
        return None
    try:
        return (fold() if fold is not None else None) or ledger_position.count(ledger)
    except (LedgerError, FileNotFoundError):
        return None


def _problem(rows: list[Book], expected: Mapping[str, int], paid: bool, ledger: SpendLedger,
             fold: Callable[[], Counted | None] | None) -> Problem | None:
    primary = _read_primary(ledger, fold)
    book = mine(rows, ledger, primary)
    if book is None:
        # A ledger the database does not know yet (`ensure_open` opens it at the next create: a new
        # host's), unless creates were paid (before 0011) and no copy of any ledger is left.
        if not rows and not ledger.exists() and paid:
            return Problem(MISSING, f"{ledger.path} does not exist and this database recorded paid creates")
        return None
    count = expected.get(book.name, 0)
    copies = [(ledger, (lambda: primary) if primary is not None else fold)]
    if ledger.mirror is not None and (ledger.mirror.exists() or not ledger.exists()):
        copies.append((ledger.copy(ledger.mirror), None))  # a mirror not started yet is copied at the next line
    seen: list[tuple[Path, int]] = []
    for copy, folded in copies:
        found = _check_copy(copy, folded, book, count)
        if isinstance(found, Problem):
            return found
        seen.append((copy.path, found))
    if len(seen) == 2 and seen[0][1] != seen[1][1]:
        (behind_path, n), (ahead_path, m) = sorted(seen, key=lambda c: c[1])
        return Problem(BEHIND, f"{behind_path} holds {n} intent line(s) since ledger {book.ledger_id} was opened, "
                               f"its copy {ahead_path} {m}: restore the shorter copy from the longer one")
    return None


def _check_copy(copy: SpendLedger, fold: Callable[[], Counted | None] | None, book: Book,
                expected: int) -> Problem | int:
    if not copy.exists():
        return Problem(MISSING, f"{copy.path} does not exist (the database opened ledger {book.ledger_id} at "
                                f"{book.path} and recorded {expected} paid create(s) to it since)")
    try:
        folded = (fold() if fold is not None else None) or ledger_position.count(copy)
    except (LedgerError, FileNotFoundError) as exc:
        return Problem(MISSING, f"{copy.path} cannot be read: {exc}")
    since = folded.intents_since(book.ledger_id)
    if since is None:
        return Problem(REPLACED, f"{copy.path} is not the ledger this database opened ({book.ledger_id} at "
                                 f"{book.path}): another file, or one truncated before its first line")
    if since < expected:
        return Problem(BEHIND, f"{copy.path} holds {since} intent line(s) since ledger {book.ledger_id} was opened; "
                               f"the database recorded {expected} paid create(s) to it since (truncated, or restored "
                               "from an older copy)")
    return since


def ensure_open(engine: Engine, ledger: SpendLedger) -> Book:
    """Before a create: the ledger's row, opened when the database does not know this ledger yet
    (an `open` line in the file, then the identity and position in the database; the line goes
    first, so a dispatch after the position read always writes its intent after the line). A row
    from before 0016 whose open line this file holds is claimed for this host."""
    with engine.connect() as conn:
        rows = books(conn)
    book = mine(rows, ledger, _read_primary(ledger, None) if rows else None)
    if book is None:
        return _open(engine, ledger, None)
    if book.host is None:
        host, path = where(ledger)
        ledger_rows.claim(engine, book.name, host, path)
    return book


def _open(engine: Engine, ledger: SpendLedger, replacing: Book | None) -> Book:
    ledger_id = "ledger_" + secrets.token_hex(12)
    ledger.open(ledger_id)  # in the file first: a database never names a ledger line that is not written
    host, path = where(ledger)
    name = replacing.name if replacing is not None else ledger_rows.key_of(host, path)
    found = ledger_rows.open_book(engine, name, ledger_id, path, host, replace=replacing is not None)
    assert found is not None
    return found


def acknowledge(engine: Engine, ledger: SpendLedger, accept: str, by: str, reason: str, worker: str) -> str:
    """An operator accepts the ledger problem of kind `accept` (refused when the problem is
    another, or there is none): a new identity is opened for this ledger in the file and the
    database (another host's ledger is not touched), and the acknowledgement is journaled
    (`gate_events`, kind `ledger_acknowledged`). Returns what was accepted, in one line."""
    if accept not in KINDS:
        raise OperatorRefused(f"--accept must be one of {', '.join(KINDS)}")
    found = problem(engine, ledger)
    if found is None:
        raise OperatorRefused("the spend ledger agrees with the database; nothing to acknowledge")
    if found.kind != accept:
        raise OperatorRefused(f"the spend ledger is {found.kind}, not {accept}: {found.text}")
    with engine.connect() as conn:
        old = mine(books(conn), ledger, _read_primary(ledger, None))
        forgotten = ledger_rows.dispatches_of(conn, old) if old is not None else 0
    book = _open(engine, ledger, old)
    accepted = (f"accepted: {found.text}. Ledger {book.ledger_id} opened at {ledger.path}"
                + (f"; the {forgotten} paid create(s) this database recorded to the old ledger are no longer all in "
                   f"a ledger: a database restored from before now may pay for up to {forgotten} of them again"
                   if forgotten else "; no paid create recorded to the old ledger is forgotten"))
    detail = {"accepted": accept, "problem": found.text, "old_ledger_id": old.ledger_id if old else None,
              "new_ledger_id": book.ledger_id, "by": by, "why": reason, "path": str(ledger.path)}
    with db.transaction(engine) as conn:
        gate_rows.record_event(conn, "ledger_acknowledged", worker[:128], json.dumps(detail, sort_keys=True))
    return accepted
