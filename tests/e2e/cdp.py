"""Headless Chromium driven over the Chrome DevTools Protocol (a websocket; no WebDriver):
navigate, evaluate, wait for a condition, take a PNG screenshot. Exceptions thrown by the page
and console/log messages (CSP violations among them) are collected for the test to check."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

# What works on these machines as root; srgb makes the screenshot's colours the CSS's exactly.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--force-color-profile=srgb", "--hide-scrollbars", "--remote-debugging-port=0"]


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self, binary: str, width: int = 1280, height: int = 900) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="polar-chromium-"))
        self._log = tempfile.TemporaryFile()
        # Its own process group: close() ends the browser and every renderer it started, by that id.
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self.profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=self._log, start_new_session=True)
        self.width = width
        self._ids = itertools.count(1)
        self.exceptions: list[str] = []
        self.messages: list[str] = []
        try:
            self._ws = connect(self._page_socket(), max_size=None, open_timeout=20).__enter__()  # closed in close()
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    def _page_socket(self, timeout: float = 30.0) -> str:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.seek(0)
                raise BrowserError(f"chromium exited {self.proc.returncode}: {self._log.read().decode()[-2000:]}")
            if port_file.is_file() and port_file.read_text().count("\n") >= 1:
                port = int(port_file.read_text().split("\n")[0])
                targets = _get_json(f"http://127.0.0.1:{port}/json/list")
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise BrowserError("chromium did not open its DevTools port")

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            raw = self._ws.recv(timeout=max(deadline - time.monotonic(), 0.01))
            msg = json.loads(raw)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.exceptions.append(str(details.get("exception", {}).get("description") or details.get("text")))
        elif method == "Runtime.consoleAPICalled":
            self.messages.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.messages.append(f"{entry.get('source')}/{entry.get('level')}: {entry.get('text')}")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        out = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in out:
            raise BrowserError(f"{expression[:200]}: {out['exceptionDetails']}")
        return out.get("result", {}).get("value")

    def wait(self, expression: str, timeout: float = 20.0) -> Any:
        """Poll ``expression`` until it is truthy (an exception, e.g. while the page loads, is false)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return false; }} }})()")
            if value:
                return value
            time.sleep(0.1)
        page = self.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
        raise BrowserError(f"not true within {timeout}s: {expression}\npage text: {page}\nexceptions: {self.exceptions}")

    def screenshot(self, path: Path) -> Path:
        """The whole page (the viewport grown to the document's height), as PNG."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=min(height, 8000),
                  deviceScaleFactor=1, mobile=False)
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None:
            ws.close()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _get_json(url: str) -> Any:
    import httpx

    try:
        return httpx.get(url, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return []
