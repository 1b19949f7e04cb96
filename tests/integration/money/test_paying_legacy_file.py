"""Files iipub reads are read whole, or refused in one line that names the limit, never cut
silently: the legacy system's decisions file (its newest decisions are at its end, past 64 MiB
here), the hand-over file (refused over its limit), the spend ledger (folded line by line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from iipub.observe import cutover
from iipub.operate import handover
from iipub.provider.openai.simulator import Simulator
from tests.integration.money.test_paying import _env, _job, _tick
from tests.support.cli import one_line_error, run_cli
from tests.support.rows import utc_today

PAST_THE_OLD_CUT = 64 * 1024 * 1024 + 4096


def _big_legacy_file(path: Path, last: dict[str, str]) -> int:
    """Older decisions (with the legacy system's long notes) filling more than 64 MiB, then the
    newest one; the number of lines."""
    old = (json.dumps({"product": "daily-brief", "edition_date": "2020-01-01", "action": "create",
                       "note": "n" * 65_000}) + "\n").encode()
    lines = PAST_THE_OLD_CUT // len(old) + 1
    with path.open("wb") as f:
        for _ in range(lines):
            f.write(old)
        f.write((json.dumps(last) + "\n").encode())
    return lines + 1


@pytest.mark.slow
def test_the_newest_legacy_decision_past_64_mib_is_read_and_nothing_is_paid_again(
        cli_env: dict[str, str], sim: Simulator, tmp_path: Path, engine: sa.Engine) -> None:
    day = utc_today()
    decisions = tmp_path / "legacy-decisions.jsonl"
    lines = _big_legacy_file(decisions, {"product": "daily-brief", "edition_date": day.isoformat(),
                                         "action": "create"})
    env = _env(cli_env, sim, tmp_path, reconcile=f'legacy_decisions_file = "{decisions}"\n')
    _tick(env, sim, 2)
    job = _job(engine)
    assert (job["state"], job["quarantine_reason"]) == ("QUARANTINED", "payment_refused"), job["last_error"]
    assert "the legacy decisions file says the legacy system did create" in job["last_error"]
    assert sim.stats()["creates_total"] == 0
    found, read, bad = cutover._legacy(decisions, [day])
    assert found == {("daily-brief", day, "create")} and bad is None and read == lines


def test_a_hand_over_file_over_its_limit_is_refused_in_one_line_naming_it(cli_env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    big = tmp_path / "handover.csv"
    line = b"daily-brief,2026-01-01,resp_" + b"a" * 40 + b"\n"
    big.write_bytes(b"product,edition_date,response_id\n" + line * (handover.MAX_BYTES // len(line) + 2))
    run_cli("db", "migrate", env=cli_env, check=True)
    done = run_cli("adopt", str(big), "--reason", "cutover", env=cli_env, cwd=tmp_path)
    one_line_error(done, 2, str(handover.MAX_BYTES))
