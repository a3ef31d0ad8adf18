"""Redis round trips per stage, for a session that runs every stage (the local runtime, an agent
`true`, the session_completed evaluator: bench/stage_profile.py's sessions): each stage's reads,
begin, writes and end are as few round trips as their guarantees allow, and a change that adds
one fails here (lower a bound when a stage needs fewer)."""

from __future__ import annotations

from pipeline.schemas import TaskRequest
from pipeline.settings import Settings
from pipeline.status import Stage
from workers.stages.bodies import BODIES
from workers.stages.common import make_deps, run_stage

# begin (with the body's first reads) ... end; see docs/delivery.md
ROUND_TRIPS = {
    Stage.INIT: 4,  # begin; admission (slot, move, runtime handle); the cancel check after setup; end
    Stage.RUN: 3,  # begin; claim (with the pause clocks read ahead of it); end
    Stage.POSTRUN: 2,  # begin (with the records and calls in flight); end (with the trajectory)
    Stage.EVALUATE: 3,  # begin (with the trajectory); the grade committed with the lease checked; end
    Stage.CALLBACK: 4,  # begin (with the result and records); terminal move; publish and count; end
}


def test_each_stage_takes_no_more_round_trips_than_it_needs(r, redis_url, tmp_path):
    d = make_deps(Settings(home=tmp_path, redis_url=redis_url, inflight_drain_seconds=0))
    sent = [0]
    base = d.stores.r.connection_pool.connection_class

    class Counting(base):  # type: ignore[misc,valid-type]
        def send_packed_command(self, command, check_health=True):  # one call per round trip
            sent[0] += 1
            return super().send_packed_command(command, check_health)

    d.stores.r.connection_pool.connection_class = Counting
    d.stores.r.connection_pool.reset()
    task = {"instruction": "noop", "num_samples": 3, "runtime": {"backend": "local"},
            "agent": {"custom_shell": {"command": "true"}}, "builder": {"strategy": "per_request"},
            "evaluator": {"strategy": "session_completed"}}
    warm, measured, _ = d.stores.tasks.create(TaskRequest.model_validate(task))
    for stage in Stage:  # (loads the scripts: the first EVALSHA of each finds none)
        assert run_stage(stage, warm.session_id, *BODIES[stage], d=d) == "done"
    trips = {}
    for stage in Stage:
        before = sent[0]
        assert run_stage(stage, measured.session_id, *BODIES[stage], d=d) == "done"
        trips[stage] = sent[0] - before
    assert trips == ROUND_TRIPS
