"""The wake-up rule's pure parts: the signature covers every table, the identity of an
environment, the decision, and which command lines the check answers."""

from __future__ import annotations

from iipub.observe import idle_check, wakeup
from iipub.settings import config
from iipub.store import tables


def test_every_table_is_signed_or_deliberately_left_out() -> None:
    signed = {name for name, _ in wakeup.SIGNED}
    assert len(signed) == len(wakeup.SIGNED), "a table named twice"
    assert signed | wakeup.UNSIGNED == set(tables.metadata.tables), (
        "a new table must be added to wakeup.SIGNED (its writes may make work due) or to UNSIGNED")
    assert not signed & wakeup.UNSIGNED


def test_signed_columns_exist() -> None:
    for name, aggregates in wakeup.SIGNED:
        table = tables.metadata.tables[name]
        for part in aggregates.split(", "):
            inner = part[part.index("(") + 1 : part.rindex(")")]
            assert inner == "*" or inner in table.c, f"{name}.{inner}"


def test_the_due_states_are_the_machines() -> None:
    from iipub.model import states

    assert set(wakeup.ACTIVE_STATES) == {s.value for s in states.ACTIVE}
    assert set(wakeup.TRACK_ACTIVE_STATES) == {s.value for s in states.TRACK_ACTIVE}
    assert set(wakeup.CUSTODY_WATCHED_STATES) == {s.value for s in states.CUSTODY_WATCHED}


def test_identity_counts_secrets_only_as_set() -> None:
    base = {"OPENAI_API_KEY": "sk-one", "IIPUB_CONFIG": "/etc/iipub.toml", "HOME": "/root"}
    same = wakeup.identity(base, "/srv/iipub")
    assert wakeup.identity({**base, "OPENAI_API_KEY": "sk-two"}, "/srv/iipub") == same
    assert wakeup.identity({**base, "SHELL": "/bin/zsh", "IIPUB_TEST_MYSQL_URL": "x",
                              "IIPUB_LOG_LEVEL": "debug", "IIPUB_WAKEUP_CHECK": "off"}, "/srv/iipub") == same
    assert wakeup.identity({**base, "IIPUB_DATABASE_URL": "mysql://u:pw@h/db"}, "/srv/iipub") == \
        wakeup.identity({**base, "IIPUB_DATABASE_URL": "mysql://u:other@h/db"}, "/srv/iipub")
    assert wakeup.identity({k: v for k, v in base.items() if k != "OPENAI_API_KEY"}, "/srv/iipub") != same
    assert wakeup.identity({**base, "IIPUB_CONFIG": "/etc/other.toml"}, "/srv/iipub") != same
    assert wakeup.identity({**base, "OPENAI_BASE_URL": "http://127.0.0.1:1"}, "/srv/iipub") != same
    assert wakeup.identity(base, "/srv/other") != same
    # the default ledger's place without a configuration file
    assert wakeup.identity({**base, "HOME": "/elsewhere"}, "/srv/iipub") != same
    assert wakeup.identity({**base, "XDG_STATE_HOME": "/var/state"}, "/srv/iipub") != same
    assert "sk-one" not in same


def _recorded(**kw: object) -> wakeup.RecordedWakeup:
    values: dict[str, object] = {"signature": "s", "identity": "i", "files": {"/c": [1, 2, 3]},
                                 "idle_summary": "{}", "asleep": True}
    values.update(kw)
    return wakeup.RecordedWakeup(**values)  # type: ignore[arg-type]


def test_why_awake() -> None:
    files = {"/c": [1, 2, 3]}
    assert wakeup.why_awake(_recorded(), "s", "i", files) is None
    assert wakeup.why_awake(None, "s", "i", files) == "no wake-up recorded"
    assert wakeup.why_awake(_recorded(asleep=False), "s", "i", files) == "due"
    assert wakeup.why_awake(_recorded(), "t", "i", files) == "database changed"
    assert wakeup.why_awake(_recorded(), "s", "j", files) == "environment changed"
    assert wakeup.why_awake(_recorded(), "s", "i", {"/c": [1, 2, 4]}) == "files changed"
    assert wakeup.why_awake(_recorded(), "s", "i", {"/c": None}) == "files changed"
    assert wakeup.why_awake(_recorded(idle_summary=None), "s", "i", files) == "no idle summary"


def test_parse_files_refuses_what_the_recorder_does_not_write() -> None:
    assert wakeup.parse_files('{"/a": [1, 2, 3], "/b": null}') == {"/a": [1, 2, 3], "/b": None}
    assert wakeup.parse_files("[1]") is None
    assert wakeup.parse_files("{not json") is None
    assert wakeup.parse_files('{"/a": ["x"]}') is None


def test_only_the_cron_lines_shape_is_answered() -> None:
    parse = idle_check._parse
    assert parse(["reconcile"]) == ("reconcile", {})
    assert parse(["relay"]) == ("relay", {})
    assert parse(["--env-file", "/srv/iipub/env", "reconcile", "--log-level", "debug"]) == (
        "reconcile", {"--env-file": "/srv/iipub/env", "--log-level": "debug"})
    assert parse(["--env-file=/e", "relay"]) == ("relay", {"--env-file": "/e"})
    for other in (["reconcile", "--shadow"], ["reconcile", "--tick-seconds", "5"], ["relay", "--prune"],
                  ["status"], [], ["--env-file"], ["reconcile", "relay"], ["--help"], ["reconcile", "--help"],
                  ["--version"], ["reconcile", "--env-file", "x"]):
        assert parse(other) is None, other


def test_the_check_knows_the_default_database() -> None:
    assert idle_check.DEFAULT_DATABASE_URL == config.DEFAULT_DATABASE_URL


def test_the_check_loads_neither_the_framework_nor_the_cli() -> None:
    import subprocess
    import sys

    code = ("import sys, iipub.observe.idle_check, iipub.entry\n"
            "bad = [m for m in ('click', 'sqlalchemy', 'structlog', 'httpx', 'openai', 'pydantic', 'iipub.cli')"
            " if m in sys.modules]\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_check_finds_the_migrations_this_installation_ships() -> None:
    import os

    from iipub.store import migrate

    shipped = max(p.name[:4] for p in migrate.sql_dir().joinpath("migrations", "sqlite").iterdir()
                  if p.name.endswith(".sql"))
    assert idle_check.newest_migration("sqlite") == shipped
    assert idle_check.newest_migration("mysql") == shipped
    assert idle_check.newest_migration("nosuch") == ""
    package = os.path.dirname(os.path.dirname(idle_check.__file__))  # iipub/
    assert os.path.isdir(os.path.join(package, os.pardir, "sql")) or os.path.isdir(os.path.join(package, "sql"))
