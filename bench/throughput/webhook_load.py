"""The webhook receiver under load: `iipub webhook serve` (waitress) as a child process on
loopback, with its production defaults ([webhooks] threads 8, connection_limit 500, backlog 1024,
read_seconds 10, request_seconds 20).

The two phases and what each records: bench/notes/webhook_load.md (also in `--help`).

    python bench/throughput/webhook_load.py [--mysql URL | --sqlite] [--clients 250] [--rounds 4] [--slow 100]
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import metering
import reporting
import simproc
from iipub.provider.openai import webhook_signature as webhook
from iipub.settings.config import WebhookSettings

SECRET = "whsec_" + base64.b64encode(b"iipub-bench-webhook-secret-0123456789").decode()
CLIENT_TIMEOUT = 60.0


@contextlib.contextmanager
def every(seconds: float, fn: Callable[[], None]) -> Iterator[None]:
    """`fn` called every `seconds` from a background thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            fn()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


@dataclass
class Sampler:
    """Peak threads and RSS of one process, from /proc/PID/status."""

    pid: int
    threads: int = 0
    rss_kib: int = 0

    def sample(self) -> None:
        status = metering.proc_status(self.pid)
        self.threads = max(self.threads, status.get("Threads", 0))
        self.rss_kib = max(self.rss_kib, status.get("VmRSS", 0))


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    resets: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def ended(self, status: str, seconds: float | None, reset: bool = False) -> None:
        with self.lock:
            self.in_flight -= 1
            self.statuses[status] += 1
            self.resets += int(reset)
            if seconds is not None:
                self.latencies.append(seconds)


def deliver(port: int, tag: str, tally: Tally) -> None:
    body = json.dumps({"id": f"evt_{tag}", "object": "event", "type": "batch.completed",
                       "created_at": int(time.time()), "data": {"id": f"batch_{tag}"}}).encode()
    headers = webhook.sign(SECRET, f"wh_{tag}", body, int(time.time()))
    tally.started()
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
    try:
        conn.request("POST", "/hooks/openai", body=body, headers=headers)
        answer = conn.getresponse()
        answer.read()
        tally.ended(str(answer.status), time.monotonic() - start)
    except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected, ConnectionAbortedError) as exc:
        tally.ended(type(exc).__name__, None, reset=True)
    except OSError as exc:
        tally.ended(type(exc).__name__, None)
    finally:
        conn.close()


def burst(port: int, clients: int, rounds: int) -> tuple[Tally, float]:
    tally = Tally()
    barrier = threading.Barrier(clients)

    def client(i: int) -> None:
        barrier.wait()
        for r in range(rounds):
            deliver(port, f"burst_{i}_{r}", tally)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(CLIENT_TIMEOUT * rounds + 10)
    return tally, time.monotonic() - start


@contextlib.contextmanager
def trickling_clients(port: int, count: int, path: str = "/hooks/openai",
                      timeout: float = CLIENT_TIMEOUT) -> Iterator[list[socket.socket]]:
    """`count` connections that each send a request head announcing a 5,000-byte body, then one
    byte every 0.5 s until the block ends. The connections stay open for the caller to read
    their answers and close (tests/integration/webhooks/test_server.py uses this too)."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=timeout) for _ in range(count)]
    for s in socks:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n".encode())

    def trickle() -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.send(b"x")

    with every(0.5, trickle):
        yield socks


def amid_slow_clients(port: int, slow: int, amid: int) -> tuple[Tally, Counter[str], float]:
    """`amid` deliveries while `slow` clients trickle; what the slow ones were answered."""
    tally = Tally()
    start = time.monotonic()
    with trickling_clients(port, slow) as socks:
        time.sleep(1.0)
        for i in range(amid):
            deliver(port, f"amid_{i}", tally)
    slow_answers: Counter[str] = Counter()
    for s in socks:
        s.settimeout(15)
        try:
            head = s.recv(64)
            slow_answers[head.split(b" ", 2)[1].decode() if head.startswith(b"HTTP/") else "closed"] += 1
        except OSError as exc:
            slow_answers[type(exc).__name__] += 1
        s.close()
    return tally, slow_answers, time.monotonic() - start


@contextlib.contextmanager
def receiver(url: str, workdir: Path) -> Iterator[tuple[int, int]]:
    env = harness.clean_env(IIPUB_DATABASE_URL=url, OPENAI_API_KEY="sk-bench", OPENAI_WEBHOOK_SECRET=SECRET,
                            OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    subprocess.run([*harness.iipub_exe(), "db", "migrate"], env=env, check=True, capture_output=True, timeout=120)
    proc = subprocess.Popen([*harness.iipub_exe(), "--log-level", "warning", "webhook", "serve", "--port", "0"],
                            env=env, cwd=workdir, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while "listening on" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError("iipub webhook serve exited before listening")
        port = int(json.loads(line)["message"].rsplit(":", 1)[-1].strip("/"))
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        yield proc.pid, port
    finally:
        simproc.stop_process(proc, 60)


def main() -> None:
    ap = harness.parser(__doc__.splitlines()[0], note="webhook_load")
    ap.add_argument("--sqlite", action="store_true", help="a temporary SQLite file instead of MariaDB")
    ap.add_argument("--clients", type=int, default=250, help="client threads in the burst (deliveries in flight)")
    ap.add_argument("--rounds", type=int, default=4, help="deliveries per client, one after the other")
    ap.add_argument("--slow", type=int, default=100, help="slow-body clients in phase 2")
    ap.add_argument("--amid", type=int, default=20, help="signed deliveries sent while the slow clients trickle")
    run = harness.start(ap)
    args = run.args
    if args.quick:
        args.clients, args.rounds, args.slow, args.amid = 200, 1, 50, 5
    budget = WebhookSettings().request_seconds
    with benchdb.fresh_database("sqlite" if args.sqlite else args.mysql, "hooks") as url, \
            tempfile.TemporaryDirectory(prefix="iipub_bench_hooks_") as d, receiver(url, Path(d)) as (pid, port):
        sampler = Sampler(pid)
        sampler.sample()
        idle_threads, idle_rss = sampler.threads, sampler.rss_kib
        with every(0.02, sampler.sample):  # the server's peaks, every 20 ms
            tally, wall = burst(port, args.clients, args.rounds)
            amid, slow_answers, slow_wall = amid_slow_clients(port, args.slow, args.amid)
        sampler.sample()
    lat = tally.latencies
    total = args.clients * args.rounds
    rows: list[list[Any]] = [
        ["deliveries sent (burst)", f"{total:,} ({args.clients} clients x {args.rounds}, a new connection each)"],
        ["peak in flight (client side)", tally.peak_in_flight],
        ["answers", ", ".join(f"{k}: {v:,}" for k, v in sorted(tally.statuses.items()))],
        ["connection resets", tally.resets],
        ["latency p50 / p99 / max", " / ".join(reporting.fmt(x * 1000, 0) for x in (
            reporting.percentile(lat, 50), reporting.percentile(lat, 99), max(lat, default=float("nan")))) + " ms"],
        ["throughput", f"{reporting.fmt(len(lat) / wall, 0)} deliveries/s ({wall:.1f} s)"],
        ["server threads idle / peak", f"{idle_threads} / {sampler.threads}"],
        ["server RSS idle / peak", f"{idle_rss / 1024:.0f} / {sampler.rss_kib / 1024:.0f} MiB"],
        [f"{args.slow} slow-body clients: answers", ", ".join(f"{k}: {v}" for k, v in sorted(slow_answers.items()))],
        [f"{args.amid} signed deliveries amid them", ", ".join(f"{k}: {v}" for k, v in sorted(amid.statuses.items()))
         + f"; max {reporting.fmt(max(amid.latencies, default=float('nan')) * 1000, 0)} ms "
           f"(budget {budget:g} s)"],
    ]
    backend = "SQLite (a temporary file)" if args.sqlite else "MariaDB"
    body = "\n".join([
        run.header("1", [f"- Database: {backend}; the receiver with its production [webhooks] defaults",
                         f"- Phase 2 wall time: {slow_wall:.1f} s"]),
        "",
        reporting.table(["figure", "value"], rows),
    ])
    run.write_section("webhook_load", "Webhook receiver under load (`iipub webhook serve`)", body)
    ok = (tally.resets == 0 and tally.statuses == Counter({"200": total})
          and amid.statuses == Counter({"200": args.amid}) and max(amid.latencies, default=0) < budget)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
