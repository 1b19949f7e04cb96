"""Two builds of iipub on the same database print the same thing and leave the same rows.

Makes one demo database with the first program (`iipub demo`, then a few operator writes so the
gate, spend overrides, scheduled slots and a suspended job exist) and migrates it with the second
(`iipub db migrate`: a no-op when the second ships no newer migration), so both read one schema
across a release that adds migrations (they only add tables, columns and indexes, so the older
build reads the newer schema). Then, for each program in turn, it restores that database at the
same path and runs the same commands: the reads operators
use (status in each form, jobs, check, quarantine, ledger, budget, config, outbox, orphans,
export, db status), a few writes (pause and unpause, a budget override, schedule, suspend and
resume) and two bad inputs. Each command's exit code, stdout and stderr are compared, timestamps
and run-specific ids aside, and so is every table's content afterwards.

The reference build is any other checkout with its own virtualenv, for example an older commit:

    git archive BASE | tar -x -C /tmp/base && python3 -m venv /tmp/base/.venv \
        && /tmp/base/.venv/bin/pip install -e /tmp/base
    .venv/bin/python bench/parity/cli_parity.py --before /tmp/base/.venv/bin/iipub --after .venv/bin/iipub

Exit 0 when everything is the same, 1 with the differences printed otherwise. `db status` lists
the migrations each build ships, so it differs whenever the second adds one.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

# (name, arguments): reads, then writes and the reads after them, then bad inputs.
COMMANDS: list[tuple[str, list[str]]] = [
    ("status", ["status"]),
    ("status --check", ["status", "--check"]),
    ("status --json", ["status", "--json"]),
    ("status --prometheus", ["status", "--prometheus", "{dir}/metrics.prom"]),
    ("jobs list", ["jobs", "list"]),
    ("jobs show", ["jobs", "show", "{job}"]),
    ("check", ["check"]),
    ("check --ledger", ["check", "--ledger"]),
    ("quarantine list", ["quarantine", "list"]),
    ("ledger show", ["ledger", "show"]),
    ("budget show", ["budget", "show"]),
    ("config show", ["config", "show"]),
    ("outbox list", ["outbox", "list"]),
    ("orphans list", ["orphans", "list"]),
    ("export --in-flight", ["export", "--in-flight"]),
    ("db status", ["db", "status"]),
    ("pause", ["pause", "--reason", "parity", "--by", "bench"]),
    ("status after pause", ["status"]),
    ("unpause", ["unpause", "--reason", "parity done", "--by", "bench"]),
    ("budget override", ["budget", "override", "--scope", "global", "--tokens", "1000", "--reason", "parity",
                         "--by", "bench"]),
    ("budget show after override", ["budget", "show"]),
    ("schedule", ["schedule", "--date", "2030-01-02"]),
    ("suspend", ["suspend", "{pending}", "--reason", "parity", "--by", "bench"]),
    ("quarantine list after suspend", ["quarantine", "list"]),
    ("resume", ["resume", "{pending}", "--reason", "parity", "--by", "bench"]),
    ("jobs list after writes", ["jobs", "list"]),
    ("status --json after writes", ["status", "--json"]),
    ("bad input: unknown job", ["jobs", "show", "no-such-job"]),
    ("bad input: bad date", ["schedule", "--date", "2030-13-40"]),
]

# What legitimately differs between two runs: times, durations, ids made per run.
_NOISE = [
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(\.\d+)?\b"), "<clock>"),
    (re.compile(r"\b\d+(\.\d+)?(e[+-]?\d+)?\s?(ms|s|m|h|d)(\d+(ms|s|m|h))*\b( ago)?"), "<duration>"),
    (re.compile(r"[\d.]+ [KMGT]?i?B free of [\d.]+ [KMGT]?i?B \([\d.]+%\)"), "<disk>"),
    (re.compile(r"database - host = [+-]"), "database - host = "),
    (re.compile(r"(disk_free_\w+)=\d+%"), r"\1=<n>%"),
    (re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b"), "<epoch>"),
    (re.compile(r"(reconcile|relay|operator|demo|cli|status|check|webhook)[-:][\w.:-]*[0-9a-f]{6,}[\w.:-]*"),
     r"\1-<worker>"),
    (re.compile(r"\b(age|seconds|lag|_seconds|elapsed|skew|offset|uncertainty)(\"?[:=]\s*\"?)-?\d+(\.\d+)?"),
     r"\1\2<n>"),
    (re.compile(r"(_seconds|_age|_lag|_timestamp|_skew|_uncertainty|_bytes|_inodes|_per_hour|_ratio)"
                r"(\{[^}]*\})? -?[\d.e+-]+"),
     r"\1\2 <n>"),
    (re.compile(r"\"(free_bytes|total_bytes|free_inodes|total_inodes|filling_bytes_per_hour|offset_seconds|"
                r"uncertainty_seconds|age_seconds|lag_seconds|generated_at|free_ratio)\": [^,}\n]+"), r'"\1": <n>'),
]


def normalise(text: str) -> str:
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    return text


def _env(work: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "USER": "bench", "LANG": "C.UTF-8",
            "IIPUB_DATABASE_URL": f"sqlite:///{work / 'iipub-demo' / 'iipub.sqlite3'}",
            "IIPUB_CONFIG": str(work / "iipub.toml"), "OPENAI_API_KEY": "sk-demo-local",
            "IIPUB_LOG_FORMAT": "json", "IIPUB_LOG_LEVEL": "warning", "COLUMNS": "200"}


def _config(work: Path) -> str:
    # A day without an OK run before the heartbeat check fails: the demo's runs age while the two
    # builds take their turns, and the check must not cross its limit between them.
    return (f'[sinks.static]\nroot = "{work / "iipub-demo" / "public"}"\n\n'
            f'[ledger]\npath = "{work / "iipub-demo" / "spend-ledger.jsonl"}"\n\n'
            '[monitoring]\nheartbeat_after_seconds = 86400\n')


def _run(exe: str, args: list[str], work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([exe, *args], cwd=work, env=_env(work), capture_output=True, text=True, timeout=300)


def _one(conn: sqlite3.Connection, query: str) -> str:
    row = conn.execute(query).fetchone()
    return str(row[0]) if row else "none"


def prepare(exe: str, work: Path) -> dict[str, str]:
    """The demo database, with a few operator writes on it; the ids the commands name."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "iipub.toml").write_text(_config(work))
    # A loaded host can take a minute a tick: the demo may take its time.
    demo = subprocess.run([exe, "demo", "--dir", str(work / "iipub-demo"), "--keep-going-seconds", "900"], cwd=work,
                          env=_env(work), capture_output=True, text=True, timeout=960)
    if demo.returncode != 0:
        sys.exit(f"demo failed: {demo.stdout[-2000:]}{demo.stderr[-2000:]}")
    for args in (["config", "accept", "--reason", "parity", "--by", "bench"],
                 ["schedule", "--date", "2030-01-01"],
                 ["pause", "--reason", "before", "--by", "bench"], ["unpause", "--reason", "after", "--by", "bench"],
                 ["budget", "override", "--scope", "global", "--tokens", "5", "--reason", "before", "--by", "bench"]):
        _run(exe, args, work)
    with sqlite3.connect(work / "iipub-demo" / "iipub.sqlite3") as conn:
        job = _one(conn, "SELECT id FROM jobs WHERE state = 'DELETED' ORDER BY id LIMIT 1")
        pending = _one(conn, "SELECT id FROM jobs WHERE state = 'NO_JOB' ORDER BY id LIMIT 1")
        first = _one(conn, "SELECT id FROM jobs WHERE state = 'NO_JOB' ORDER BY id DESC LIMIT 1")
    # One parked slot, so quarantine and status have something to show.
    _run(exe, ["suspend", first, "--reason", "held for parity", "--by", "bench"], work)
    return {"job": job, "pending": pending}


def migrate(exe: str, work: Path) -> None:
    """The demo database at the second build's schema, which both builds then read: the first
    made it, so it holds the first's migrations, and the second would refuse it while one of its
    own is missing."""
    proc = _run(exe, ["db", "migrate"], work)
    if proc.returncode != 0:
        sys.exit(f"db migrate with {exe} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    applied = [line.removeprefix("applied ") for line in proc.stdout.splitlines() if line.startswith("applied ")]
    print(f"migrated by --after: {', '.join(applied) if applied else 'nothing to apply'}")


def dump(database: Path) -> str:
    """Every table's rows, sorted, with timestamps and run ids normalised."""
    out = []
    with sqlite3.connect(database) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for name in names:
            if name in ("runs", "disk_samples", "wakeups"):  # one row per run: times and pids only
                continue
            rows = sorted(normalise(repr(r)) for r in conn.execute(f'SELECT * FROM "{name}"'))
            out.append(f"== {name} ({len(rows)} rows)")
            out.extend(rows)
    return "\n".join(out)


def play(exe: str, pristine: Path, work: Path, ids: dict[str, str]) -> dict[str, str]:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(pristine, work)
    seen = {}
    for name, args in COMMANDS:
        filled = [a.format(dir=work, **ids) for a in args]
        proc = _run(exe, filled, work)
        text = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
        if name.startswith("status --prometheus"):
            prom = work / "metrics.prom"
            text += "--- file\n" + (prom.read_text() if prom.exists() else "(not written)\n")
        seen[name] = normalise(text.replace(str(work), "<work>"))
    seen["tables afterwards"] = dump(work / "iipub-demo" / "iipub.sqlite3").replace(str(work), "<work>")
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the iipub executable of the reference build")
    ap.add_argument("--after", required=True, help="the iipub executable of the build under test")
    ap.add_argument("--keep", type=Path, help="write each side's outputs under this folder")
    args = ap.parse_args()
    # The commands run in the demo's folder: a relative path (`.venv/bin/iipub`) is made absolute here.
    args.before, args.after = (os.path.abspath(exe) if os.sep in exe else exe for exe in (args.before, args.after))
    with tempfile.TemporaryDirectory(prefix="iipub-parity-") as tmp:
        root = Path(tmp)
        pristine, work = root / "pristine", root / "work"
        ids = prepare(args.before, work)  # made where the commands run: its paths are theirs
        migrate(args.after, work)
        shutil.copytree(work, pristine)
        before = play(args.before, pristine, work, ids)
        after = play(args.after, pristine, work, ids)
    differing = 0
    for name in before:
        if args.keep is not None:
            for side, seen in (("before", before), ("after", after)):
                path = args.keep / side / (re.sub(r"[^\w]+", "_", name) + ".txt")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(seen[name])
        if before[name] == after[name]:
            print(f"same       {name}")
            continue
        differing += 1
        print(f"DIFFERENT  {name}")
        sys.stdout.writelines(difflib.unified_diff(before[name].splitlines(True), after[name].splitlines(True),
                                                   "before", "after", n=1))
    print(f"\n{len(before) - differing} of {len(before)} the same")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
