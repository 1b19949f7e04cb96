"""`iipub webhook prune`: verified deliveries and misses past `[webhooks] keep_days` deleted, the
rows per table printed as JSON; `serve` refuses to start without the signing secret."""

from __future__ import annotations

import json

import sqlalchemy as sa

from tests.support.cli import run_cli


def test_prune_prints_what_it_deleted_per_table(cli_env: dict[str, str], engine: sa.Engine) -> None:
    doc = json.loads(run_cli("webhook", "prune", env=cli_env, check=True).stdout)
    assert doc == {"pruned": {"webhook_deliveries": 0, "webhook_misses": 0, "orphans": 0}}


def test_serve_without_a_signing_secret_is_a_configuration_error(cli_env: dict[str, str], engine: sa.Engine) -> None:
    res = run_cli("webhook", "serve", "--port", "0", env=cli_env)
    assert res.returncode == 78 and len(res.stderr.strip().splitlines()) >= 1
