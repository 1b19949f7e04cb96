"""Every typed error has its exit code (the command line turns an error into its code alone);
the codes follow sysexits where one fits, and a bug is never mistaken for an operating condition."""

from __future__ import annotations

import inspect

from iipub.core import errors

EXPECTED = {
    "IipubError": 1, "ConfigError": 78, "ConfigMismatch": 78, "MissingApiKey": 78, "DatabaseUnavailable": 69,
    "DatabaseRefused": 65, "Interrupted": 130, "SchemaNotReady": 69, "UsageError": 2, "UnknownId": 4,
    "OperatorRefused": 3, "IllegalTransition": 70, "InvariantViolation": 70, "LeaseLost": 75, "JobTaken": 75,
    "Contention": 75, "AlreadyInstalled": 73, "CannotWrite": 73,
}


def _error_classes() -> dict[str, type[errors.IipubError]]:
    return {name: cls for name, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, errors.IipubError) and cls.__module__ == errors.__name__}


def test_every_error_has_the_exit_code_it_documents() -> None:
    found = {name: cls.exit_code for name, cls in _error_classes().items()}
    assert {name: found[name] for name in EXPECTED} == EXPECTED


def test_every_error_says_what_it_is() -> None:
    assert all(cls.__doc__ for cls in _error_classes().values())


def test_a_configuration_mismatch_or_missing_key_is_a_configuration_error() -> None:
    assert issubclass(errors.ConfigMismatch, errors.ConfigError)
    assert issubclass(errors.MissingApiKey, errors.ConfigError)
    assert str(errors.UsageError("bad --date")) == "bad --date"
