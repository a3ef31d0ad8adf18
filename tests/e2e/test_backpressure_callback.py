"""The READY buffer bounds initialised runtimes; callback_url gets the task result."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from infra.embedded_redis import free_port
from pipeline.status import TaskState
from tests.e2e.conftest import RUN_SLOTS, sleepy_task, wait_for


def test_init_never_runs_ahead_of_the_ready_buffer(client, stack):
    capacity = stack.settings.ready_capacity
    n = RUN_SLOTS + capacity + 2
    task_id = client.submit(sleepy_task(timeout_seconds=120, samples=n))

    def settled():
        st = client.status(task_id, results=False)
        return st if st.counts.get("RUNNING") == RUN_SLOTS and st.counts.get("READY") == capacity else None

    st = wait_for(settled, timeout=90, interval=0.2)
    # All run slots busy, READY full: the rest wait *before* a runtime is created.
    assert st.counts.get("REGISTERED") == 2
    runtimes = [d for d in stack.settings.runtime_root.iterdir() if d.name in {s.session_id for s in st.sessions}]
    assert len(runtimes) == RUN_SLOTS + capacity
    ready = client.pipeline_status()["ready"]
    assert ready["depth"] == capacity and ready["reserved"] == capacity
    client.cancel(task_id)
    final = client.wait(task_id, timeout=90, results=False)
    assert final.status == TaskState.CANCELLED and final.counts == {"CANCELLED": n}


class Receiver(BaseHTTPRequestHandler):
    bodies: list = []
    fail_first = 1

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        failing = len(type(self).bodies) <= type(self).fail_first
        self.send_response(500 if failing else 200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_callback_url_is_posted_once_with_retries(client, demo_task):
    port = free_port()
    server = HTTPServer(("127.0.0.1", port), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        demo_task.update(num_samples=2, callback_url=f"http://127.0.0.1:{port}/callback/task_result")
        task_id = client.submit(demo_task)
        client.wait(task_id, timeout=120, results=False)
        st = wait_for(lambda: (s := client.status(task_id)).callback and s, timeout=30)
    finally:
        server.shutdown()
    assert st.callback["delivered"] is True and st.callback["attempts"] == 2
    assert len(Receiver.bodies) == 2  # one failed delivery, one retry; never again after success
    body = Receiver.bodies[-1]
    assert body["task_id"] == task_id and body["status"] == "completed"
    assert len(body["results"]) == 2 and all(r["reward"] == 1.0 for r in body["results"])
