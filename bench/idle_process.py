"""The CPU an idle `iipub reconcile` process costs (cron starts one every minute, 1,440 a day),
beside `python -c pass` and a bare `import sqlalchemy` in the same run, on a migrated SQLite
file with nothing due. With `--compare REV` the same command from an earlier commit (a git
worktree of REV on PYTHONPATH) is measured in the same run, alternating, so the host's load
affects both alike.

    .venv/bin/python bench/idle_process.py [--runs 15] [--compare REV]

CPU is user + system time of each child (`resource.getrusage(RUSAGE_CHILDREN)` deltas); the
table shows the median and the ratio to `python -c pass`. Each tree measured has its bytecode
compiled first and the children run without PYTHONDONTWRITEBYTECODE, as cron runs an
installed package (pip compiles what it installs): otherwise every run would compile iipub's
own modules again (about 0.15 s here), a cost no deployment pays.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = '[[products]]\nname = "daily-brief"\nopens_at = "23:59"\nprompt = "x"\nitems = 3\n'


def cpu_of(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--compare", metavar="REV", help="also measure `iipub reconcile` as of this commit")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="iipub_idle_") as tmp:
        work = Path(tmp)
        (work / "iipub.toml").write_text(CONFIG)
        env = {**os.environ, "IIPUB_DATABASE_URL": f"sqlite:///{work}/iipub.sqlite3", "OPENAI_API_KEY": "sk-idle",
               "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "IIPUB_CONFIG": str(work / "iipub.toml")}
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        py = sys.executable
        subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "iipub")], check=True, capture_output=True)
        subprocess.run([py, "-m", "iipub", "db", "migrate"], env=env, cwd=work, check=True, capture_output=True)
        subprocess.run([py, "-m", "iipub", "reconcile"], env=env, cwd=work, check=True, capture_output=True)
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([py, "-c", "pass"], env),
            "python -c 'import sqlalchemy'": ([py, "-c", "import sqlalchemy"], env),
            "iipub reconcile (idle)": ([py, "-m", "iipub", "reconcile"], env),
        }
        if args.compare:
            old = work / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.compare],
                           check=True, capture_output=True)
            subprocess.run([py, "-m", "compileall", "-q", str(old / "iipub")], check=True, capture_output=True)
            cases[f"iipub reconcile (idle) at {args.compare[:10]}"] = (
                [py, "-m", "iipub", "reconcile"], {**env, "PYTHONPATH": str(old)})
        samples: dict[str, list[float]] = {name: [] for name in cases}
        try:
            for _ in range(args.runs):
                for name, (cmd, case_env) in cases.items():
                    samples[name].append(cpu_of(cmd, case_env, work))
        finally:
            if args.compare:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "before")],
                               check=False, capture_output=True)
    floor = statistics.median(samples["python -c pass"])
    print(f"runs per case: {args.runs}; load average {os.getloadavg()[0]:.2f}; {sys.version.split()[0]}; "
          "bytecode compiled")
    print("| process | median CPU s | min–max s | × `python -c pass` |")
    print("|---|---|---|---|")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.3f} | {min(values):.3f}–{max(values):.3f} | {med / floor:.0f}× |")


if __name__ == "__main__":
    main()
