"""A small asyncio HTTP/1.1 load generator (keep-alive, Content-Length or chunked bodies), so
the benchmark needs nothing outside Python. It records every request's latency."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)  # seconds
    errors: int = 0
    wall: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.wall if self.wall else 0.0

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _worker(url: str, body: bytes, deadline: float, result: Result, count: list[int], total: int) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    req = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n").encode() + body
    try:
        while time.perf_counter() < deadline and count[0] < total:
            count[0] += 1
            t0 = time.perf_counter()
            writer.write(req)
            status = await _read_response(reader)
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status == 200:
                result.latencies.append(time.perf_counter() - t0)
            else:
                result.errors += 1
    finally:
        writer.close()


async def _run(url: str, body: bytes, concurrency: int, seconds: float, total: int) -> Result:
    result, count = Result(), [0]
    t0 = time.perf_counter()
    await asyncio.gather(*(_worker(url, body, t0 + seconds, result, count, total) for _ in range(concurrency)))
    result.wall = time.perf_counter() - t0
    return result


def run(url: str, body: bytes, concurrency: int, seconds: float = 5.0, total: int = 10**9) -> Result:
    return asyncio.run(_run(url, body, concurrency, seconds, total))
