"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: the
browser reads commands on fd 3 and answers on fd 4, each message JSON ended by a NUL byte), with
no library and no port: load a local page in a colour scheme, read what the page computed, take a
screenshot, and collect the console's errors and every request the page made."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def chromium() -> str | None:
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc, self._out, self._in = proc, to_browser, from_browser
        self._next = 0
        self._buffer = b""
        self.events: list[dict[str, Any]] = []

    def _send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode("utf-8") + b"\0")
        return self._next

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)  # type: ignore[no-any-return]

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})  # type: ignore[no-any-return]
            if "method" in message:
                self.events.append(message)

    def wait_for(self, method: str, timeout: float = 60) -> dict[str, Any]:
        for event in self.events:
            if event["method"] == method:
                self.events.remove(event)
                return event
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message.get("method") == method:
                return message
            if "method" in message:
                self.events.append(message)


@contextmanager
def browser(profile: Path) -> Iterator[Browser]:
    exe = chromium()
    assert exe is not None
    to_r, to_w = os.pipe()  # what the browser reads (its fd 3)
    from_r, from_w = os.pipe()  # what it writes (its fd 4)

    def fds() -> None:
        os.dup2(to_r, 3)
        os.dup2(from_w, 4)

    proc = subprocess.Popen(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=fds, pass_fds=(3, 4))  # kept open in the child after preexec_fn put the pipes there
    os.close(to_r)
    os.close(from_w)
    b = Browser(proc, to_w, from_r)
    try:
        yield b
    finally:
        try:
            b._send("Browser.close")
            proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=20)
        os.close(to_w)
        os.close(from_r)


# Every visible element with text of its own: its colour (an SVG text's fill), the background it is
# drawn on (the nearest opaque one, translucent layers composed over it) and the WCAG contrast.
CONTRAST_JS = r"""
(() => {
  const parse = (c) => {
    const m = /rgba?\(([^)]+)\)/.exec(c || "");
    if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
  };
  const over = (top, under) => ({r: top.r * top.a + under.r * (1 - top.a), g: top.g * top.a + under.g * (1 - top.a),
                                 b: top.b * top.a + under.b * (1 - top.a), a: 1});
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
  };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
    }
    // Under every layer: the root's background over the canvas (white where the page sets none).
    let base = {r: 255, g: 255, b: 255, a: 1};
    const root = parse(getComputedStyle(document.documentElement).backgroundColor);
    if (root && root.a > 0 && !layers.includes(root)) base = over(root, base);
    return layers.reverse().reduce((acc, c) => over(c, acc), base);
  };
  const out = {checked: 0, failures: [], samples: []};
  for (const el of document.querySelectorAll("body *")) {
    const own = [...el.childNodes].filter((n) => n.nodeType === 3 && n.textContent.trim()).map((n) => n.textContent);
    if (!own.length || !el.getClientRects().length || el.closest("title")) continue;
    const style = getComputedStyle(el);
    if (style.visibility === "hidden" || style.display === "none") continue;
    const bg = background(el);
    let fg = parse(el instanceof SVGElement ? style.fill : style.color);
    if (!fg) { out.failures.push({tag: el.tagName, text: own.join(" ").slice(0, 40), why: "no colour"}); continue; }
    if (fg.a < 1) fg = over(fg, bg);
    const [l1, l2] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (l1 + 0.05) / (l2 + 0.05);
    out.checked += 1;
    if (out.samples.length < 3) out.samples.push({tag: el.tagName, ratio});
    if (ratio < 4.5) out.failures.push({tag: el.tagName, text: own.join(" ").slice(0, 40), ratio,
                                        fg: style.color, fill: style.fill, bg});
  }
  return out;
})()
"""


@dataclass(frozen=True)
class Loaded:
    contrast: dict[str, Any]  # {checked, failures, samples} of CONTRAST_JS
    errors: list[str]  # console errors, exceptions, error log entries
    requests: list[str]  # every URL the page asked for (the page itself included)
    title: str


def load(b: Browser, page: Path, scheme: str, screenshot: Path | None = None, width: int = 1000,
         height: int = 1300) -> Loaded:
    """`page` in a fresh tab under `prefers-color-scheme: scheme`."""
    target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        b.call(f"{domain}.enable", session=session)
    b.call("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
           session=session)
    b.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                  "mobile": False}, session=session)
    b.events.clear()
    b.call("Page.navigate", {"url": page.as_uri()}, session=session)
    b.wait_for("Page.loadEventFired")
    contrast = b.call("Runtime.evaluate", {"expression": CONTRAST_JS, "returnByValue": True},
                      session=session)["result"]["value"]
    title = b.call("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                   session=session)["result"]["value"]
    if screenshot is not None:
        shot = b.call("Page.captureScreenshot", {"format": "png"}, session=session)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
    errors, requests = [], []
    for event in b.events:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
            errors.append(json.dumps(params.get("args"))[:300])
        elif method == "Runtime.exceptionThrown":
            errors.append(json.dumps(params.get("exceptionDetails"))[:300])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
            errors.append(str(params["entry"].get("text"))[:300])
        elif method == "Network.requestWillBeSent":
            requests.append(params["request"]["url"])
    b.call("Target.closeTarget", {"targetId": target})
    return Loaded(contrast, errors, requests, title)
