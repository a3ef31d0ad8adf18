"""The READY buffer bounds initialised runtimes; callback_url gets the task result."""

from __future__ import annotations

import hashlib
import hmac
import json

from pipeline.status import TaskState
from tests.e2e.conftest import RUN_SLOTS, sleepy_task, wait_for
from tests.support_http import Receiver


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


def test_callback_url_is_delivered_once_with_retries_and_signed(client, demo_task, stack):
    receiver = Receiver(script=[503])
    try:
        # credentials in the URL (masked wherever the URL is shown) must not reach the worker's log either
        secret_url = receiver.url.replace("http://", "http://hook:CBPASSWORD@") + "?token=CBQUERYSECRET"
        demo_task.update(num_samples=2, callback_url=secret_url)
        task_id = client.submit(demo_task)
        client.wait(task_id, timeout=120, results=False)
        st = wait_for(lambda: (s := client.status(task_id)).callback and s.callback["state"] == "delivered" and s,
                      timeout=30)
    finally:
        receiver.close()
    assert st.callback["delivered"] is True and st.callback["attempts"] == 2
    assert len(receiver.posts) == 2 and len(receiver.delivered_once()) == 1  # one key, retried once
    headers, body = receiver.posts[-1]
    want = "sha256=" + hmac.new((stack.settings.secret("callback_secret") or "").encode(),
                                headers["x-polar-timestamp"].encode() + b"." + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["x-polar-signature"], want)
    sent = json.loads(body)
    assert sent["task_id"] == task_id and sent["status"] == "completed" and len(sent["results"]) == 2
    assert headers["authorization"].startswith("Basic ")  # (the URL's credentials were used)
    logs = b"".join(p.read_bytes() for p in stack.log_dir.glob("*.log"))
    assert b"polar.callback.deliver" in logs and b"polar.stage.callback" in logs  # (the workers' logs are read)
    assert b"CBPASSWORD" not in logs and b"CBQUERYSECRET" not in logs
