"""The wake-up rule's pure parts: the signature covers every table, the identity of an
environment, the decision, and which command lines the check answers."""

from __future__ import annotations

from typing import Any

from iipub.observe import idle_check, wakeup
from iipub.settings import config
from iipub.store import tables, wakeup_sql


def test_every_table_is_signed_or_deliberately_left_out() -> None:
    signed = {name for name, _, _ in wakeup_sql.SIGNED}
    assert len(wakeup_sql.SIGNED) == len(set(wakeup_sql.SIGNED)), "a part twice"
    assert signed | wakeup_sql.UNSIGNED == set(tables.metadata.tables), (
        "a new table must be added to wakeup_sql.SIGNED (its writes may make work due) or to UNSIGNED")
    assert not signed & wakeup_sql.UNSIGNED


def test_signed_columns_exist() -> None:
    for name, aggregates, _ in wakeup_sql.SIGNED:
        table = tables.metadata.tables[name]
        for part in aggregates.split(", "):
            inner = part[part.index("(") + 1 : part.rindex(")")]
            assert inner == "*" or inner in table.c, f"{name}.{inner}"


def test_the_due_and_live_states_are_the_machines() -> None:
    from iipub.model import states

    assert set(wakeup_sql.ACTIVE_STATES) == {s.value for s in states.ACTIVE}
    assert set(wakeup_sql.TRACK_ACTIVE_STATES) == {s.value for s in states.TRACK_ACTIVE}
    assert set(wakeup_sql.CUSTODY_WATCHED_STATES) == {s.value for s in states.CUSTODY_WATCHED}
    assert set(wakeup_sql.LIVE_JOB_STATES) == {s.value for s in set(states.State) - states.TERMINAL}
    assert set(wakeup_sql.LIVE_TRACK_STATES) == {
        s.value for s in states.TRACK_STATES - {states.State.PUBLISHED, states.State.DELETED}}
    assert states.State.SAVED_NOT_PUBLIC.value == wakeup_sql.RELAY_STATE


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


def test_identity_counts_the_variables_the_settings_name_and_the_network_ones() -> None:
    base = {"OPENAI_API_KEY": "sk-one", "HOME": "/root"}
    named = ["CMS_SIGNING_SECRET"]
    same = wakeup.identity(base, "/srv", named)
    assert wakeup.identity({**base, "CMS_SIGNING_SECRET": "s3cret"}, "/srv", named) != same  # set vs unset
    with_secret = wakeup.identity({**base, "CMS_SIGNING_SECRET": "s3cret"}, "/srv", named)
    assert wakeup.identity({**base, "CMS_SIGNING_SECRET": "other"}, "/srv", named) == with_secret  # only as set
    assert wakeup.identity({**base, "CMS_SIGNING_SECRET": "s3cret"}, "/srv") == wakeup.identity(base, "/srv")
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                 "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        assert wakeup.identity({**base, name: "x"}, "/srv", named) != same, name
    proxy = wakeup.identity({**base, "HTTPS_PROXY": "http://u:pw@proxy:3128"}, "/srv", named)
    assert wakeup.identity({**base, "HTTPS_PROXY": "http://u:other@proxy:3128"}, "/srv", named) == proxy
    assert wakeup.identity({**base, "HTTPS_PROXY": "http://u:pw@proxy:3129"}, "/srv", named) != proxy


def test_a_place_is_a_host_a_folder_and_a_configuration() -> None:
    one = wakeup.place({"IIPUB_CONFIG": "/etc/a.toml"}, "/srv", "web1")
    assert wakeup.place({"IIPUB_CONFIG": "/etc/a.toml", "OPENAI_PROJECT_ID": "p"}, "/srv", "web1") == one
    assert wakeup.place({"IIPUB_CONFIG": "/etc/a.toml"}, "/srv", "web2") != one
    assert wakeup.place({"IIPUB_CONFIG": "/etc/b.toml"}, "/srv", "web1") != one
    assert wakeup.place({"IIPUB_CONFIG": "/etc/a.toml"}, "/other", "web1") != one


def test_the_cap_brings_the_cron_minute_a_cap_away_to_a_full_run() -> None:
    import datetime as dt

    from iipub.observe import wakeup_store

    started = dt.datetime(2026, 1, 1, 12, 0, 0, 400_000)
    bound = wakeup_store.cap_bound(started, 300)
    assert bound < dt.datetime(2026, 1, 1, 12, 5, 0)  # the 12:05 run, even a second early, is full
    assert bound > dt.datetime(2026, 1, 1, 12, 4, 1)  # the 12:04 run may still answer idle
    assert wakeup_store.cap_bound(started, 30) < started  # under a minute: every run is full


def test_the_check_reads_the_mysql_url_options_the_engine_reads() -> None:
    import pytest

    assert idle_check.mysql_options("charset=utf8mb4&unix_socket=/run/mysqld/mysqld.sock") == {
        "charset": "utf8mb4", "unix_socket": "/run/mysqld/mysqld.sock"}
    assert idle_check.mysql_options("connect_timeout=5&ssl_verify_cert=true") == {
        "connect_timeout": 5, "ssl_verify_cert": True}
    for bad in ("x=1", "connect_timeout=soon", "charset=a&charset=b", "ssl_verify_cert=maybe"):
        with pytest.raises(ValueError, match=r"."):
            idle_check.mysql_options(bad)


def _recorded(**kw: object) -> wakeup.RecordedWakeup:
    values: dict[str, object] = {"signature": "s", "identity": "i", "files": {"/c": [1, 2, 3]},
                                 "idle_summary": "{}", "asleep": True}
    values.update(kw)
    return wakeup.RecordedWakeup(**values)  # type: ignore[arg-type]


def test_why_awake() -> None:
    files = {"/c": [1, 2, 3]}

    def now(value: object) -> object:
        return lambda: value

    def never() -> Any:
        raise AssertionError("read although an earlier comparison decided")

    assert wakeup.why_awake(_recorded(), "i", now(files), now("s")) is None  # type: ignore[arg-type]
    assert wakeup.why_awake(None, "i", never, never) == "no wake-up recorded"
    assert wakeup.why_awake(_recorded(asleep=False), "i", never, never) == "due"
    assert wakeup.why_awake(_recorded(), "j", never, never) == "environment changed"
    assert wakeup.why_awake(_recorded(), "i", now({"/c": [1, 2, 4]}), never) == "files changed"  # type: ignore[arg-type]
    assert wakeup.why_awake(_recorded(), "i", now({"/c": None}), never) == "files changed"  # type: ignore[arg-type]
    assert wakeup.why_awake(_recorded(), "i", now(files), now("t")) == "database changed"  # type: ignore[arg-type]
    assert wakeup.why_awake(_recorded(idle_summary=None), "i", never, never) == "no idle summary"


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
