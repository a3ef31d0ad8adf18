"""Stored trajectories and results in a real Redis: version-2 blobs, and version-1 blobs a
deployment kept from before the upgrade, read side by side (results, summaries, task status)."""

from pipeline import keys
from pipeline.codec import pack
from pipeline.schemas import SessionResult, TaskRequest
from pipeline.settings import Settings
from pipeline.status import SessionStatus
from pipeline.stores import Stores
from tests.unit.blob_fixtures import v1_cases
from tests.unit.test_result_blobs import result, trace


def test_results_and_trajectories_of_both_versions_read_back(r):
    outputs = Stores.open(r, Settings()).outputs
    new = result(trace([1, 2], [3, 4], [1.0, 0.0], [-0.5, 0.0]), reward=1.0)
    outputs.save_result("s-new", new)
    outputs.save_trajectory("s-new", new.trajectory)
    old = v1_cases.multi_trace_result()
    r.set(keys.session_result("s-old"), (v1_cases.HERE / "v1_result_multi.msgpack").read_bytes())
    r.set(keys.session_trajectory("s-old"), (v1_cases.HERE / "v1_trajectory.msgpack").read_bytes())

    assert r.get(keys.session_result("s-new"))[1:15] == b"\xacblob_version\x03"  # the map's first entry
    for sid, expected in (("s-new", new), ("s-old", old)):
        assert pack(outputs.result(sid)) == pack(expected)
        assert pack(outputs.trajectory(sid)) == pack(expected.trajectory)
        assert outputs.parse_summary(r.get(keys.session_result(sid))) == expected.summary()


def test_task_status_summaries_with_and_without_results_agree(r):
    stores = Stores.open(r, Settings())
    request = TaskRequest.model_validate({"instruction": "x", "agent": {"custom_shell": "true"}, "num_samples": 2})
    specs = stores.tasks.create(request)
    done = SessionResult(session_id=specs[0].session_id, task_id=request.task_id, status=SessionStatus.COMPLETED,
                         reward=1.0, trajectory=result(trace([1, 2], [3, 4, 5], [1.0, 0.0, 1.0])).trajectory)
    stores.outputs.save_result(done.session_id, done)

    light = stores.tasks.status(request.task_id, include_results=False)
    full = stores.tasks.status(request.task_id, include_results=True)
    assert light.results == [] and [x.session_id for x in full.results] == [done.session_id]
    assert light.sessions == full.sessions and light.sessions[0] == done.summary()
    assert light.sessions[0].trainable_tokens == 2 and light.sessions[1].status == SessionStatus.REGISTERED
