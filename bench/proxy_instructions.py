"""The proxy's own work per model call, counted in instructions (valgrind's callgrind), so that a
change can be judged on a machine whose speed moves by the minute (the timings of
``proxy_bench.py`` swing by a third between runs on a shared VM; instruction counts repeat
within ~1-2 %).

    .venv/bin/python bench/proxy_instructions.py [--against REV] [--json]

Each count runs the proxy's WSGI app in one process, as a gunicorn worker would call it but
without sockets to a client or engine: the request body handed in, the engine a transport that
returns a prepared vLLM answer (``infra/fake_upstream.py``'s ``agent`` turn: a 48-token tool call
with its ids and logprobs, prompt ids for the whole prompt), Redis real (embedded): admission,
translation, the engine request, capture, the record and its release round trip, the answer.
Requests: ``bench/chat_requests.py``'s 10-message coding-agent request and the 32k-token one, not
streamed. Instructions per call = (count at N2 calls - count at N1 calls) / (N2 - N1), user space
only (not the kernel's part of the Redis round trips). ``--against REV``: the same, for the tree
as of a git revision (a temporary worktree), in the same run. Needs valgrind (Debian's package).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = {"10 messages": ("coding_turns", 50, 250), "32k tokens": ("long_conversation", 5, 25)}


def drive(calls: int, redis_url: str, key: str, case: str) -> None:
    """Run in the tree under test (its folder first on sys.path): ``calls`` model calls."""
    import orjson

    from bench import chat_requests
    from infra import fake_upstream
    from pipeline.settings import Settings
    from proxy.app import create_app

    body = getattr(chat_requests, case)()
    raw = orjson.dumps(body)
    answer = orjson.dumps(fake_upstream._agent_turn({**body, "model": "agent"}, raw))

    class Engine:
        def request(self, base: str, method: str, path: str, payload: bytes | None) -> tuple[int, bytes]:
            if method == "GET":
                return 200, orjson.dumps({"data": [{"id": "agent", "max_model_len": 131072}]})
            return 200, answer

    app = create_app(Settings(home=tempfile.mkdtemp(prefix="polar-bench-"), redis_url=redis_url,
                              upstream_url="http://engine.test"), transport=Engine())
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": f"/s/{key}/v1/chat/completions", "QUERY_STRING": "",
               "SERVER_NAME": "bench", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": "bench",
               "wsgi.url_scheme": "http", "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(raw))}
    status: list[str] = []

    def start_response(line: str, headers: Any, exc_info: Any = None) -> None:
        status.append(line)

    for _ in range(20 + calls):  # 20 to warm up (imports, scripts, the connection), then the counted ones
        b"".join(app({**environ, "wsgi.input": io.BytesIO(raw)}, start_response))
        if not status.pop().startswith("200"):
            raise SystemExit("the proxy did not answer 200")


def instructions(tree: Path, calls: int, redis_url: str, key: str, case: str) -> int:
    out = Path(tempfile.mkdtemp(prefix="polar-callgrind-")) / "callgrind.out"
    try:
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                              str(ROOT / "bench" / "proxy_instructions.py"), "--drive", str(tree), str(calls),
                              redis_url, key, case],
                             cwd=tree, capture_output=True, text=True,
                             # as the CLI starts a proxy: numpy's OpenBLAS without its idle threads
                             env={**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1"})
        found = re.search(r"Collected : (\d+)", run.stderr)
        if run.returncode != 0 or not found:
            raise SystemExit(f"callgrind run failed in {tree}:\n{run.stderr[-2000:]}")
        return int(found.group(1))
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


def per_call(tree: Path, redis_url: str, key: str, case: str, few: int, many: int) -> float:
    return (instructions(tree, many, redis_url, key, case) - instructions(tree, few, redis_url, key, case)) / (many - few)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", metavar="REV", help="also count the tree as of this git revision")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON line; tables on stderr")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    sys.path.insert(0, str(ROOT))
    from infra.embedded_redis import EmbeddedRedis
    from tests.support import running_session

    out = sys.stderr if args.json else sys.stdout
    trees = [("this tree", ROOT)]
    scratch = None
    if args.against:
        scratch = Path(tempfile.mkdtemp(prefix="polar-against-"))
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(scratch / "tree"), args.against],
                       check=True, capture_output=True)
        trees.append((args.against, scratch / "tree"))
    rows = []
    try:
        with EmbeddedRedis() as server:
            key = running_session(server.url)
            for label, (case, few, many) in CASES.items():
                counts = [per_call(tree, server.url, key, case, few, many) for _, tree in trees]
                rows.append((label, counts))
                print(f"{label}: " + ", ".join(f"{name} {n / 1e6:.2f} M instructions per call"
                                               for (name, _), n in zip(trees, counts))
                      + (f" ({counts[0] / counts[1]:.2f}x)" if len(counts) > 1 else ""), file=out, flush=True)
    finally:
        if scratch is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "tree")],
                           capture_output=True)
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        from bench.figures import emit, figure

        inputs = {"10 messages": "10-message, 4.6 kB chat request, in one process",
                  "32k tokens": "402-message, 132 kB chat request, in one process"}
        figures = [figure(f"proxy instructions per call, {label}", round(counts[0] / 1e6, 3), "M instructions",
                          inputs[label]) for label, counts in rows]
        figures += [figure(f"proxy instructions per call, {label}, this tree / {args.against}",
                           round(counts[0] / counts[1], 3), "x", inputs[label]) for label, counts in rows
                    if len(counts) > 1]
        emit("proxy_instructions", figures, against=args.against)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--drive":
        tree_root, count, url, session_key, which = sys.argv[2:7]
        sys.path.insert(0, tree_root)
        drive(int(count), url, session_key, which)
    else:
        main()
