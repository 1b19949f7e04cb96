"""A database knows the configuration that runs it (PRODUCT.md section 21).

A configuration's identity is where it lives and where it sends money's and publication's
evidence: the configuration file's path, the spend ledger's path and the static site's root, each
resolved to the file it names (symlinks followed, relative paths taken from the configuration
file's folder), so a command run from any folder, or through a symlink to the file, is the same
configuration. The file's SHA-256 is recorded beside them but is not part of the identity: editing
the TOML in place is how operators change settings, so a changed fingerprint at the same path is
accepted by the next writing command and journaled (`edited`). The same file moved to another
path (the same content, ledger and static root; nothing left at its old path, or the same content)
is accepted and journaled too (`moved`). Another identity (another file, none at all, the same file
pointing at another ledger or site) is refused for writing with one line; read-only commands warn.
`iipub config accept` adopts the command's configuration on purpose (journaled): the runbook's
move of a whole installation folder ends with it.

`compare` is the pure decision; `verify` reads and appends the `config_identity` rows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from iipub.core.errors import ConfigMismatch, SchemaNotReady
from iipub.settings.config import Settings
from iipub.store import clock, db, tables


@dataclass(frozen=True)
class Identity:
    config_path: str | None  # None: built-in defaults (IIPUB_CONFIG unset)
    config_sha256: str | None
    ledger_path: str | None  # None: the ledger is off
    static_root: str | None  # None: no static sink

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        return (self.config_path, self.ledger_path, self.static_root)

    def describe(self) -> str:
        where = self.config_path or "built-in defaults (IIPUB_CONFIG unset)"
        return f"configuration {where}, ledger {self.ledger_path or 'off'}, static root {self.static_root or 'none'}"


class IdentityVerdict(Enum):
    ADOPT = "adopt"  # nothing recorded yet: the first writer records its identity
    SAME = "same"
    EDITED = "edited"  # same identity, another fingerprint: accepted and journaled
    MOVED = "moved"  # the same file (content, ledger, static root) at another path: accepted and journaled
    COPY = "copy"  # the same content at another path while the recorded file is unchanged: nothing to record
    OTHER = "other"  # another identity: writes refused, reads warned


GONE = "gone"  # what `left_behind` is when nothing is left at the recorded configuration's path


def compare(recorded: Identity | None, current: Identity, left_behind: str | None = GONE) -> IdentityVerdict:
    """`left_behind`: the SHA-256 of the file at the recorded configuration's path now (GONE when
    there is none; None when it cannot be read), which tells a moved file from a second one."""
    if recorded is None:
        return IdentityVerdict.ADOPT
    if recorded.key != current.key:
        same_file_elsewhere = (
            recorded.config_path is not None and current.config_path is not None
            and current.config_sha256 is not None and recorded.config_sha256 == current.config_sha256
            and (recorded.ledger_path, recorded.static_root) == (current.ledger_path, current.static_root))
        if same_file_elsewhere and left_behind == GONE:
            return IdentityVerdict.MOVED
        if same_file_elsewhere and left_behind == current.config_sha256:
            return IdentityVerdict.COPY
        return IdentityVerdict.OTHER
    return IdentityVerdict.SAME if recorded.config_sha256 == current.config_sha256 else IdentityVerdict.EDITED


def left_at(recorded: Identity | None) -> str | None:
    """What is at the recorded configuration's path now: its SHA-256, GONE, or None (unreadable)."""
    if recorded is None or recorded.config_path is None:
        return GONE
    try:
        return hashlib.sha256(Path(recorded.config_path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return GONE
    except OSError:
        return None


def _real(path: str | None) -> str | None:
    return os.path.realpath(path) if path is not None else None


def resolved(identity: Identity) -> Identity:
    """The identity with each path resolved to the file it names now (a row recorded before paths
    were resolved, or through a symlink, compares equal to the same files named directly)."""
    return Identity(_real(identity.config_path), identity.config_sha256, _real(identity.ledger_path),
                    _real(identity.static_root))


def differences(recorded: Identity, current: Identity) -> str:
    """What differs, in the words of one line."""
    names = ("configuration file", "ledger", "static root")
    parts = [f"{name} {have or 'none'} (the database's: {want or 'none'})"
             for name, have, want in zip(names, current.key, recorded.key, strict=True) if have != want]
    return "; ".join(parts)


def of(settings: Settings) -> Identity:
    """The identity of the configuration a command runs with."""
    path = settings.config_path
    sha = None
    if path is not None:
        try:
            sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            sha = None
    ledger = settings.ledger_path()
    static = settings.static_sink
    return Identity(
        config_path=_real(str(path)) if path is not None else None,
        config_sha256=sha,
        ledger_path=_real(str(ledger)) if ledger is not None else None,
        static_root=_real(str(static.root)) if static is not None else None,
    )


@dataclass(frozen=True)
class RecordedIdentity:
    identity: Identity
    kind: str
    at: dt.datetime
    command: str
    by: str
    host: str
    reason: str | None
    during_freeze: bool


def history(conn: Connection, limit: int = 20) -> list[RecordedIdentity]:
    """The newest rows first (the first is in force); SchemaNotReady before migration 0013."""
    c = tables.config_identity.c
    try:
        rows = conn.execute(sa.select(tables.config_identity).order_by(c.id.desc()).limit(limit)).mappings().all()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if db.is_missing_table(exc):
            raise SchemaNotReady("the config_identity table is missing (migration 0013): run `iipub db migrate`") \
                from None
        raise
    return [RecordedIdentity(Identity(r["config_path"], r["config_sha256"], r["ledger_path"], r["static_root"]),
                     r["kind"], r["at"], r["command"], r["by_whom"], r["host"], r["reason"], bool(r["during_freeze"]))
            for r in rows]


def in_force(conn: Connection) -> Identity | None:
    """The identity in force, its paths resolved as `of` resolves a command's (with several hosts:
    the newest one's; `members` lists every one)."""
    found = members(conn)
    return found[-1] if found else None


def members(conn: Connection) -> list[Identity]:
    """Every identity in force, oldest first, paths resolved: one per host once hosts joined
    (`config accept --join`), else one. Replayed from the journal: `adopted` and `accepted`
    begin again with one; `joined` adds one; `edited` and `moved` replace the one they are of;
    `left` removes one."""
    c = tables.config_identity.c
    try:
        rows = conn.execute(sa.select(c.kind, c.config_path, c.config_sha256, c.ledger_path, c.static_root)
                            .order_by(c.id)).all()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        if db.is_missing_table(exc):
            raise SchemaNotReady("the config_identity table is missing (migration 0013): run `iipub db migrate`") \
                from None
        raise
    return replay([(str(r[0]), resolved(Identity(r[1], r[2], r[3], r[4]))) for r in rows])


def replay(rows: list[tuple[str, Identity]]) -> list[Identity]:
    """The identities in force after the journal's rows (kind, identity), oldest first (pure)."""
    found: list[Identity] = []
    for kind, identity in rows:
        if kind in ("adopted", "accepted"):
            found = [identity]
        elif kind == "left":
            found = [m for m in found if m.key != identity.key]
        elif kind == "moved":
            same = [i for i, m in enumerate(found) if (m.config_sha256, m.ledger_path, m.static_root)
                    == (identity.config_sha256, identity.ledger_path, identity.static_root)]
            found = [identity if i == (same[0] if same else -1) else m for i, m in enumerate(found)]
            if not same:
                found.append(identity)
        else:  # edited, joined
            kept = [m for m in found if m.key != identity.key]
            found = [*kept, identity] if len(kept) == len(found) else \
                [identity if m.key == identity.key else m for m in found]
    return found


_PREFERRED = (IdentityVerdict.SAME, IdentityVerdict.EDITED, IdentityVerdict.MOVED, IdentityVerdict.COPY)


def judge(found: list[Identity], current: Identity) -> tuple[IdentityVerdict, Identity | None]:
    """The command's verdict against every identity in force, and the one it is about."""
    if not found:
        return IdentityVerdict.ADOPT, None
    verdicts = [(compare(m, current, left_at(m)), m) for m in found]
    for wanted in _PREFERRED:
        for verdict, member in verdicts:
            if verdict is wanted:
                return verdict, member
    return IdentityVerdict.OTHER, found[-1]


def record(conn: Connection, identity: Identity, kind: str, command: str, by: str, reason: str | None = None,
           during_freeze: bool = False) -> None:
    conn.execute(tables.config_identity.insert().values(
        at=clock.now(conn), kind=kind, config_path=identity.config_path, config_sha256=identity.config_sha256,
        ledger_path=identity.ledger_path, static_root=identity.static_root, command=command[:64], by_whom=by[:255],
        host=socket.gethostname()[:255], reason=reason, during_freeze=during_freeze))


@dataclass(frozen=True)
class Check:
    verdict: IdentityVerdict
    recorded: Identity | None
    current: Identity
    freeze: tuple[str, ...] = ()  # the spent budgets an edit or an acceptance was recorded under

    def mismatch(self) -> str | None:
        """One line when the command's configuration is not the database's, else None."""
        if self.verdict is not IdentityVerdict.OTHER or self.recorded is None:
            return None
        return (f"this database runs with another configuration: {differences(self.recorded, self.current)}; "
                "run the command with cron's environment (IIPUB_ENV_FILE or IIPUB_CONFIG as the crontab sets "
                "them); only after moving the installation on purpose (runbook: \"Moving an installation\") "
                "adopt this one with `iipub config accept --reason …`, or add another host's with `iipub config "
                "accept --join --reason …` (docs/scale-out.md)")


Frozen = Callable[[Connection], list[str]]  # the SLOs whose error budget is spent (a change freeze)


def verify(engine: Engine, settings: Settings, *, command: str, by: str, write: bool,
           frozen: Frozen | None = None) -> Check:
    """Compare the command's configuration with the database's. A writer adopts the first
    identity and records an edited file's new fingerprint (flagged `during_freeze` when `frozen`
    names a spent error budget: asked only then, it reads a month of the journal); another
    identity raises ConfigMismatch for a writer and is returned for a reader to warn about."""
    current = of(settings)
    freeze: list[str] = []
    with engine.connect() as conn:  # the usual case writes nothing: no write lock taken
        verdict, recorded = judge(members(conn), current)
    if write and verdict in (IdentityVerdict.ADOPT, IdentityVerdict.EDITED, IdentityVerdict.MOVED):
        with engine.begin() as conn:
            verdict, recorded = judge(members(conn), current)  # again, inside the writing transaction
            freeze = _record_change(conn, verdict, current, command, by, frozen)
    result = Check(verdict, recorded, current, tuple(freeze))
    problem = result.mismatch()
    if write and problem is not None:
        raise ConfigMismatch(f"refusing to write: {problem}")
    return result


def _record_change(conn: Connection, verdict: IdentityVerdict, current: Identity, command: str, by: str,
                   frozen: Frozen | None) -> list[str]:
    freeze: list[str] = []
    if verdict is IdentityVerdict.ADOPT:
        record(conn, current, "adopted", command, by)
    elif verdict in (IdentityVerdict.EDITED, IdentityVerdict.MOVED):
        freeze = frozen(conn) if frozen is not None else []
        reason = f"changed during a change freeze: error budget spent for {', '.join(freeze)}" if freeze else None
        record(conn, current, verdict.value, command, by, reason, during_freeze=bool(freeze))
    return freeze


def accept(engine: Engine, settings: Settings, *, by: str, reason: str, frozen: Frozen | None = None,
           kind: str = "accepted") -> Check:
    """`iipub config accept`: the command's configuration becomes the database's (journaled);
    `kind` "joined" (`--join`): it is added beside the ones in force (another host's), "left"
    (`--leave`): it is removed from them (a host taken out)."""
    current = of(settings)
    with engine.begin() as conn:
        verdict, recorded = judge(members(conn), current)
        if kind == "left" and verdict is IdentityVerdict.OTHER:
            raise ConfigMismatch(f"refusing to remove: {current.describe()} is not in force")
        freeze = frozen(conn) if frozen is not None else []
        record(conn, current, kind, f"config accept{' --join' if kind == 'joined' else ''}"
               f"{' --leave' if kind == 'left' else ''}", by, reason, during_freeze=bool(freeze))
    return Check(verdict, recorded, current, tuple(freeze))
