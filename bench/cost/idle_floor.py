"""The idle floor: what any idle check costs at least. Start Python, connect with the driver
alone, ask one question, record a heartbeat, commit, exit. Run cold by bench/cost/idle_cost.py:

    .venv/bin/python bench/cost/idle_floor.py URL
"""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import unquote, urlsplit


def main(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.split(":///", 1)[1], isolation_level=None)
        now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
        mark = "?"
    else:
        import pymysql

        conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=unquote(parts.username or ""),
                               password=unquote(parts.password or ""), database=parts.path.lstrip("/"),
                               autocommit=True)
        now = "UTC_TIMESTAMP(6)"
        mark = "%s"
    cur = conn.cursor()
    cur.execute("SELECT MIN(next_attempt_at) FROM jobs WHERE state = 'NO_JOB'")
    cur.fetchone()
    cur.execute(f"INSERT INTO runs (command, host, pid, worker, started_at, finished_at, ok) "
                f"VALUES ({mark}, {mark}, {mark}, {mark}, {now}, {now}, 1)",
                ("floor", socket.gethostname(), os.getpid(), "floor"))
    conn.commit()
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
