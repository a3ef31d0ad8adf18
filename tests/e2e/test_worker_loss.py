"""A RUN worker killed mid-session (OOM, node loss): the reaper notices the expired stage lease,
the stage is recovered (the agent is killed, never started twice), and the session ends as
ERROR with the partial trajectory captured so far, long before any visibility timeout."""

from __future__ import annotations

from pathlib import Path

from pipeline.status import SessionStatus, TaskState
from tests.e2e.conftest import sleepy_task, wait_for


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_killed_run_worker_is_recovered(client, stack):
    task_id = client.submit(sleepy_task(timeout_seconds=300))
    sid = client.status(task_id).sessions[0].session_id
    runtime = stack.settings.runtime_root / sid
    wait_for(lambda: (runtime / "workspace" / "started.txt").exists(), timeout=60)
    agents = [int(p.name) for p in (runtime / ".pids").iterdir()]
    killed = stack.kill("worker-run")  # the lost message stays with the dead worker
    wait_for(lambda: stack.pid("worker-run") not in (None, killed), timeout=30)  # the supervisor restarts it
    # lease (6 s) + reaper interval (2 s) + teardown: within a minute, not the 4 h visibility timeout
    status = client.wait(task_id, timeout=60, poll_seconds=0.5)
    [result] = status.results
    assert status.status == TaskState.COMPLETED
    assert result.status == SessionStatus.ERROR and "run worker lost" in (result.error or "")
    assert len(result.trajectory.traces) == 1  # the model call made before the loss is kept
    wait_for(lambda: not any(_alive(p) for p in agents), timeout=10)  # the orphaned agent is gone
