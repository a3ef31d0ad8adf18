"""A submission's MULTI/EXEC against a real Redis whose connection is lost half-way: redis-py
reports that as a WatchError -- the same error as a real conflict -- so the store must tell
them apart (a 409 for a task that was never stored made a retrying client wait on nothing)."""

from __future__ import annotations

import pytest
import redis

from pipeline import keys
from pipeline.errors import TaskExists
from pipeline.schemas import TaskRequest
from pipeline.settings import Settings
from pipeline.stores import Stores
from pipeline.stores.connection import connect
from pipeline.stores.sessions import SessionStore


@pytest.fixture
def stores(r, redis_url, tmp_path):
    settings = Settings(home=tmp_path, redis_url=redis_url)
    return Stores.open(connect(settings), settings)


def task(task_id: str) -> TaskRequest:
    return TaskRequest.model_validate({"task_id": task_id, "instruction": "x", "num_samples": 2,
                                       "agent": {"custom_shell": "true"}})


def test_a_connection_killed_between_watch_and_exec_is_retried_not_a_conflict(stores, r, monkeypatch):
    register = SessionStore.register
    killed = []

    def register_then_kill(self, spec, pipe=None):
        if not killed:  # the watching connection dies while the transaction is being built
            killed.append(r.client_kill_filter(_type="normal", skipme=True))
        return register(self, spec, pipe)

    monkeypatch.setattr(SessionStore, "register", register_then_kill)
    specs = stores.tasks.create(task("lost-conn"))
    assert killed and killed[0] >= 1
    assert len(specs) == 2 and r.exists(keys.task("lost-conn"))
    assert [s.decode() for s in r.lrange(keys.task_sessions("lost-conn"), 0, -1)] == [s.session_id for s in specs]
    with pytest.raises(TaskExists):  # a real second submission is still the conflict it is
        stores.tasks.create(task("lost-conn"))


def test_an_exec_applied_before_its_reply_was_lost_is_this_calls_own_task(stores, r, monkeypatch):
    execute = redis.client.Pipeline.execute
    lost = []

    def execute_then_lose_the_reply(self, raise_on_error=True):
        transaction = self.explicit_transaction  # (execute resets it)
        result = execute(self, raise_on_error)
        if transaction and not lost:
            lost.append(True)
            raise redis.WatchError("A ConnectionError occurred while watching one or more keys")
        return result

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute_then_lose_the_reply)
    specs = stores.tasks.create(task("reply-lost"))
    assert lost and len(specs) == 2
    assert [s.decode() for s in r.lrange(keys.task_sessions("reply-lost"), 0, -1)] == [s.session_id for s in specs]
