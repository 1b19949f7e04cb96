"""Typed errors. Each carries a default message and the exit code the CLI uses.

Only `iipub.cli` turns these into exit codes and one-line messages; everything
else raises them.
"""

from __future__ import annotations


class IipubError(Exception):
    """iipub failed."""

    exit_code = 1

    def __init__(self, message: str | None = None, **context: object) -> None:
        self.context = context
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(IipubError):
    """The configuration is invalid."""

    exit_code = 78  # EX_CONFIG


class ConfigMismatch(ConfigError):
    """The database runs with another configuration; this command refuses to write."""


class MissingApiKey(ConfigError):
    """OPENAI_API_KEY is not set; refusing to touch any job."""


class DatabaseUnavailable(IipubError):
    """The database cannot be reached."""

    exit_code = 69  # EX_UNAVAILABLE


class DatabaseRefused(IipubError):
    """The database refused a value (too long, out of range); nothing was written."""

    exit_code = 65  # EX_DATAERR


class Interrupted(IipubError):
    """Interrupted."""

    exit_code = 130  # 128 + SIGINT, as a shell reports it


class SchemaNotReady(IipubError):
    """The database schema is missing or out of date; run `iipub db migrate`."""

    exit_code = 69


class MigrationError(IipubError):
    """A migration failed."""


class AlreadyInstalled(IipubError):
    """`iipub init` found files it would have written; nothing was overwritten."""

    exit_code = 73  # EX_CANTCREAT


class UsageError(IipubError):
    """The command line is invalid."""

    exit_code = 2


class UnknownId(IipubError):
    """No job (or other object) with that id."""

    exit_code = 4


class OperatorRefused(IipubError):
    """The operator action is not allowed in the job's current situation."""

    exit_code = 3


class IllegalTransition(IipubError):
    """The state machine does not allow this transition."""

    exit_code = 70  # EX_SOFTWARE: a bug, never an operating condition


class InvariantViolation(IipubError):
    """An internal safety invariant would be broken; nothing was sent or written."""

    exit_code = 70


class LeaseLost(IipubError):
    """The job changed under us (stale version or lost lease); our write was rejected."""

    exit_code = 75  # EX_TEMPFAIL


class JobTaken(IipubError):
    """Another worker holds the job's lease."""

    exit_code = 75


class Contention(IipubError):
    """The database reported a deadlock or lock-wait timeout; the work was rolled back."""

    exit_code = 75


class CannotWrite(IipubError):
    """An output file could not be written."""

    exit_code = 73  # EX_CANTCREAT
