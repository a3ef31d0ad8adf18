"""Stage messages built by ``pipeline.messages`` are what Celery's own ``send_task`` puts in the
broker (ids aside), in the same list, so the stage queues' Celery workers read them as theirs: a
Celery or kombu upgrade that changes the format fails here first."""

from __future__ import annotations

import base64
import json

import pytest

from pipeline.celery_app import dispatch, make_app
from pipeline.messages import init_priority, queue_key, stage_message
from pipeline.settings import Settings
from pipeline.status import Stage

VARYING = {("headers", "id"), ("headers", "root_id"), ("headers", "origin"), ("properties", "correlation_id"),
           ("properties", "delivery_tag"), ("properties", "reply_to")}


def decoded(raw: bytes) -> dict:
    message = json.loads(raw)
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


@pytest.mark.parametrize("stage, dispatch_priority", [(Stage.INIT, 0), (Stage.INIT, 100), (Stage.INIT, 40),
                                                      (Stage.RUN, None), (Stage.CALLBACK, None)])
def test_a_stage_message_is_celerys_own(r, redis_url, stage, dispatch_priority):
    app = make_app(Settings(redis_url=redis_url))
    priority = init_priority(dispatch_priority) if dispatch_priority is not None else 0
    dispatch(app, stage, "sess-abc", **({"priority": priority} if dispatch_priority is not None else {}))
    key = queue_key(stage.queue, priority)
    [theirs] = [decoded(m) for m in r.lrange(key, 0, -1)]  # Celery pushed it to the list ours goes to
    ours = decoded(stage_message(stage.task_name, "sess-abc", stage.queue, priority))
    assert theirs.keys() == ours.keys() and theirs["body"] == ours["body"]
    for part in ("headers", "properties"):
        assert theirs[part].keys() == ours[part].keys(), part
        for k in theirs[part]:
            if (part, k) not in VARYING:
                assert theirs[part][k] == ours[part][k], (part, k)
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]
    assert theirs["content-type"] == ours["content-type"] == "application/json"


def test_every_message_has_its_own_ids():
    a, b = (decoded(stage_message("polar.stage.run", "s", "run")) for _ in range(2))
    assert a["headers"]["id"] != b["headers"]["id"]
    assert a["properties"]["delivery_tag"] != b["properties"]["delivery_tag"]


def test_priorities_map_onto_kombus_lists():
    assert [queue_key("init", p) for p in (0, 2, 3, 5, 6, 9, 12, -1)] == [
        "init", "init", "init\x06\x163", "init\x06\x163", "init\x06\x166", "init\x06\x169", "init\x06\x169", "init"]
