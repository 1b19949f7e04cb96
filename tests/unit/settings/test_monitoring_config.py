"""`[monitoring]` (heartbeats and the dead-man's-switch ping) is validated like every other
section: strict, bounded, one line per problem naming `[section] key`, exit 78 before any
database is opened. And what a run keeps of its summary and error is bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iipub.core.errors import ConfigError
from iipub.observe import heartbeat
from iipub.provider.factory import settings_from_dict
from iipub.settings.config import MonitoringSettings
from tests.support.cli import clean_env, one_line_error, run_cli

BAD = [
    ({"ping_url": "ftp://hc.example/x"}, "[monitoring] ping_url must be an http(s) URL"),
    ({"ping_url": "https://hc.example/a b"}, "[monitoring] ping_url must be an http(s) URL without spaces"),
    ({"ping_url": "https://hc.example/\u00e9"}, "[monitoring] ping_url must be an http(s) URL without spaces"),
    ({"ping_url": "https:///x"}, "[monitoring] ping_url has no host"),
    ({"ping_url": "https://hc.example:99999/x"}, "[monitoring] ping_url is not a valid URL"),
    ({"ping_url": "https://hc.example/{cmd}"}, "[monitoring] ping_url may hold only the placeholder {command}"),
    ({"ping_url": "https://user:pw@hc.example/x"}, "[monitoring] ping_url must not carry credentials"),
    ({"ping_url": 5}, "[monitoring] ping_url must be an http(s) URL"),
    ({"ping_url": "https://hc.example/" + "x" * 2000}, "[monitoring] ping_url: string should have at most 2000"),
    ({"ping_timeout_seconds": 0}, "[monitoring] ping_timeout_seconds"),
    ({"ping_timeout_seconds": 60}, "[monitoring] ping_timeout_seconds"),
    ({"heartbeat_after_seconds": "300"}, "[monitoring] heartbeat_after_seconds"),
    ({"heartbeat_after_seconds": -1}, "[monitoring] heartbeat_after_seconds"),
    ({"heartbeat_after_seconds": 30}, "[monitoring] heartbeat_after_seconds (30) must be 0 (off) or at least 60"),
    ({"heartbeat_after_seconds": True}, "[monitoring] heartbeat_after_seconds"),
    ({"pingurl": "https://hc.example/x"}, "[monitoring]: unknown key(s) pingurl"),
]


@pytest.mark.parametrize(("section", "needle"), BAD, ids=[n for _, n in BAD])
def test_each_bad_value_is_one_line_naming_the_key(section: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        settings_from_dict({"monitoring": section})
    lines = str(exc.value).splitlines()
    assert len(lines) == 1 and needle in lines[0], lines


def test_good_values_and_the_status_spelling() -> None:
    assert settings_from_dict({}).monitoring == MonitoringSettings(300.0, None, 5.0)
    m = settings_from_dict({"monitoring": {"ping_url": "https://hc-ping.example/KEY/iipub-{command}",
                                           "heartbeat_after_seconds": 0, "ping_timeout_seconds": 2}}).monitoring
    assert m.ping_url == "https://hc-ping.example/KEY/iipub-{command}" and m.heartbeat_after_seconds == 0
    # PRODUCT.md calls it [status] heartbeat_after_seconds: the same setting.
    assert settings_from_dict({"status": {"heartbeat_after_seconds": 900}}).monitoring.heartbeat_after_seconds == 900
    both = {"status": {"heartbeat_after_seconds": 900}, "monitoring": {"heartbeat_after_seconds": 900}}
    assert settings_from_dict(both).monitoring.heartbeat_after_seconds == 900
    with pytest.raises(ConfigError, match="disagree"):
        settings_from_dict({"status": {"heartbeat_after_seconds": 900}, "monitoring": {"heartbeat_after_seconds": 60}})
    # A limit shorter than a tick would always be CRITICAL: it is raised to the tick plus a minute.
    long_ticks = settings_from_dict({"monitoring": {"heartbeat_after_seconds": 100},
                                     "reconcile": {"tick_seconds": 200, "lease_seconds": 300}})
    assert long_ticks.heartbeat_limit() == 260
    assert settings_from_dict({"monitoring": {"heartbeat_after_seconds": 0}}).heartbeat_limit() == 0
    with pytest.raises(ConfigError, match="at least 60"):
        settings_from_dict({"monitoring": {"heartbeat_after_seconds": 30}})


def test_the_command_line_refuses_it_with_exit_78(tmp_path: Path) -> None:
    cfg = tmp_path / "iipub.toml"
    cfg.write_text('[monitoring]\nping_url = "gopher://x"\nheartbeat_after_seconds = 1\n', encoding="utf-8")
    env = {**clean_env(), "IIPUB_CONFIG": str(cfg), "IIPUB_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           "OPENAI_API_KEY": "sk-test"}
    for args in (("reconcile",), ("relay",)):
        one_line_error(run_cli(*args, env=env, cwd=tmp_path), 78,
                       "[monitoring] ping_url must be an http(s) URL without spaces or non-ASCII characters "
                       "(got 'gopher://x')")
    assert not (tmp_path / "db.sqlite3").exists()


def test_a_run_keeps_a_bounded_summary_and_error() -> None:
    small = {"leased": 3, "transitions": {"ACCEPTED": 2}}
    assert json.loads(heartbeat.bounded_summary(small) or "") == small
    huge = {"leased": 3, "worker": "w", "transitions": {f"S{i}": i for i in range(5000)}}
    kept = json.loads(heartbeat.bounded_summary(huge) or "")
    assert kept == {"leased": 3, "worker": "w", "truncated": True}
    assert heartbeat.bounded_summary({"x": "y" * 20_000}) == '{"truncated": true}'
    assert heartbeat.bounded_summary(None) is None
    long_error = heartbeat._bounded("boom\n" * 2000, heartbeat.ERROR_MAX_CHARS)
    assert len(long_error) == heartbeat.ERROR_MAX_CHARS and "\n" not in long_error and long_error.endswith("…")


def test_a_log_line_names_the_ping_host_never_its_path() -> None:
    assert heartbeat.ping_target("https://hc-ping.example:8443/SECRET/iipub") == "https://hc-ping.example:8443"
