"""What `iipub init` lays out, as text: the configuration the package itself loads, the env file
kept secret, the same cron schedule in the crontab and the systemd units, and every path under
the chosen root."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

from iipub.operate import install
from iipub.settings.loading import settings_from_dict


def test_every_file_lies_under_the_root_and_the_secrets_are_private(tmp_path: Path) -> None:
    layout, files = install.plan(tmp_path, "/opt/iipub/bin/iipub", "sqlite:////var/lib/iipub/x.sqlite3")
    assert files and all(f.path.is_relative_to(tmp_path) for f in files)
    assert len({f.path for f in files}) == len(files)
    (env,) = [f for f in files if f.path == layout.env_file]
    assert env.mode == 0o600 and "OPENAI_API_KEY" in env.text
    assert "IIPUB_DATABASE_URL=sqlite:////var/lib/iipub/x.sqlite3" in env.text


def test_the_configuration_written_is_one_iipub_loads_with_its_prompts(tmp_path: Path) -> None:
    layout, files = install.plan(tmp_path)
    for f in files:  # as init writes them (what a pure test may do: real files in its own folder)
        f.path.parent.mkdir(parents=True, exist_ok=True)
        f.path.write_text(f.text)
    (config,) = [f for f in files if f.path == layout.config]
    settings = settings_from_dict(tomllib.loads(config.text), config.path.parent, config_path=config.path)
    prompts = {f.path for f in files if f.path.parent == layout.prompts}
    assert len(settings.products) == len(prompts) == 2


def test_cron_and_systemd_run_the_same_commands_with_the_same_executable(tmp_path: Path) -> None:
    layout, files = install.plan(tmp_path, "/opt/iipub/bin/iipub")
    crontab = next(f.text for f in files if f.path == layout.crontab)
    units = "\n".join(f.text for f in files if f.path.parent == layout.systemd)
    assert "IIPUB=/opt/iipub/bin/iipub" in crontab
    for job in install.cron_jobs(layout):
        words = " ".join(install.cron_word(a) for a in shlex.split(job.args))
        assert f'timeout {job.timeout} "$IIPUB" {words} >' in crontab
        assert job.args in units and job.calendar in units
    assert [j.name for j in install.cron_jobs(layout)] == ["reconcile", "relay", "prometheus", "prune", "report"]
