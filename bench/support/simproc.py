"""The provider simulator (`iipub.provider.openai.simulator.Simulator`) in its own process, so its HTTP
handling and JSON rendering do not share the benchmarked process's GIL, with real responses
created on it before a measurement (`SimProc.precreate`).

Run as `python bench/support/simproc.py sim-child '<options json>'` it is the simulator child.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class SimProc:
    """`iipub.provider.openai.simulator.Simulator` served from a child process (`bench/support/simproc.py sim-child`),
    driven over a line protocol on its stdin/stdout."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "sim-child", json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.url: str = hello["url"]
        self.origin: str = hello["origin"]
        self._lock = threading.Lock()

    def _call(self, op: str, **kw: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"simulator child exited ({self.proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"simulator child: {reply['error']}")
        return reply["result"]

    def precreate(self, bodies: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create responses (the same backend call an HTTP create makes, minus the socket and
        the configured latency); returns their ids in order."""
        ids: list[str] = []
        for i in range(0, len(bodies), 1000):
            ids += self._call("precreate", bodies=list(bodies[i : i + 1000]))
        return ids

    def advance(self, seconds: float) -> None:
        self._call("advance", seconds=seconds)

    def requests(self) -> dict[str, int]:
        """Requests served over HTTP so far, by operation."""
        return dict(self._call("requests"))

    def reset(self) -> None:
        self._call("reset")

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self._call("quit")
            stop_process(self.proc, 10, signals=())

    def __enter__(self) -> SimProc:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def stop_process(proc: subprocess.Popen[Any], timeout: float, *, signals: Sequence[int] = (signal.SIGTERM,),
                 group: bool = False) -> int | None:
    """Terminate, wait, then kill: send `signals` to `proc` (to its process group when `group`;
    SIGCONT first wakes a stopped one), wait up to `timeout` seconds for it to exit, then SIGKILL
    it. Its exit status, or None when it had to be killed."""

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            (os.killpg if group else os.kill)(proc.pid, sig)

    if proc.poll() is None:
        for sig in signals:
            send(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait(timeout=30)
        return None


def _sim_child(options_json: str) -> None:
    from iipub.provider.openai.simulator import Simulator, SimulatorOptions

    sim = Simulator(SimulatorOptions(**json.loads(options_json))).start()
    print(json.dumps({"url": sim.url, "origin": sim.origin}), flush=True)
    backend = sim.backend
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            op = cmd.pop("op")
            try:
                if op == "precreate":
                    # Backend.create sweeps every stored response per call (O(n) each); the
                    # sweep only expires finished ones, so skip it while seeding.
                    backend._sweep = lambda: None  # type: ignore[method-assign]
                    try:
                        result: Any = []
                        for body in cmd["bodies"]:
                            reply = backend.create(json.dumps(body).encode())
                            if reply.status != 200:
                                raise RuntimeError(f"precreate answered {reply.status}: {reply.body}")
                            result.append(reply.body["id"])
                    finally:
                        del backend._sweep
                elif op == "advance":
                    result = sim.advance(float(cmd["seconds"]))
                elif op == "requests":
                    with backend._lock:
                        result = dict(backend._stats.requests)
                elif op == "reset":
                    sim.reset()
                    result = True
                elif op == "quit":
                    print(json.dumps({"result": True}), flush=True)
                    break
                else:
                    raise ValueError(f"unknown op {op!r}")
                print(json.dumps({"result": result}), flush=True)
            except Exception as exc:  # report, keep serving
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    finally:
        sim.stop()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "sim-child":
        root = str(Path(__file__).resolve().parents[2])
        if root not in sys.path:  # running from a checkout without the editable install
            sys.path.insert(0, root)
        _sim_child(sys.argv[2])
    else:
        sys.exit("usage: simproc.py sim-child '<SimulatorOptions as JSON>'")
