"""One store class per Redis structure: the only code that reads or writes it. Key names come
from ``pipeline.keys``, Lua scripts from ``stores.lua``.

| structure                                   | store                                  |
|---------------------------------------------|----------------------------------------|
| session hash, session in-flight counter     | ``sessions.SessionStore``              |
| session completion / error record lists     | ``records.RecordStore``                |
| session trajectory and result blobs         | ``outputs.OutputStore``                |
| Responses-API state of a session            | ``responses.ResponseStore``            |
| task hash, its session list and counted set | ``tasks.TaskStore``                    |
| READY list and slot leases                  | ``ready.ReadyBuffer``                  |
| stage leases, the reaper's lock             | ``leases``                             |
| a stage's two ends (lease, marks, next msg) | ``stage_runs.StageRuns``               |
| the results stream                          | ``results_stream.ResultsStream``       |
| a results group's hand-overs, acked         | ``results_ledger.GroupLedger`` (a      |
| sessions, closed and lost GRPO groups       | mixin of ``ResultsStream``)            |
| proxy pause + holders, version, in-flight   | ``proxy_control.ProxyControlStore``    |
| callback deliveries (outbox) and their due  | ``callbacks.CallbackOutbox``           |
| Celery's stage queue lists (read only)      | ``queues.queue_depths``                |
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from pipeline.settings import Settings
from pipeline.stores.callbacks import CallbackOutbox
from pipeline.stores.outputs import OutputStore
from pipeline.stores.proxy_control import ProxyControlStore
from pipeline.stores.ready import ReadyBuffer
from pipeline.stores.records import RecordStore
from pipeline.stores.responses import ResponseStore
from pipeline.stores.results_stream import ResultsStream
from pipeline.stores.sessions import SessionStore
from pipeline.stores.stage_runs import StageRuns
from pipeline.stores.tasks import TaskStore


@dataclass(frozen=True)
class Stores:
    """Every store on one client, configured from the settings."""

    r: redis.Redis
    sessions: SessionStore
    records: RecordStore
    outputs: OutputStore
    responses: ResponseStore
    tasks: TaskStore
    ready: ReadyBuffer
    results: ResultsStream
    proxy_control: ProxyControlStore
    callbacks: CallbackOutbox
    stage_runs: StageRuns

    @classmethod
    def open(cls, r: redis.Redis, settings: Settings) -> "Stores":
        ttl = settings.result_ttl_seconds
        sessions = SessionStore(r, ttl)
        outputs = OutputStore(r, ttl, layout=settings.blob_layout)
        ready = ReadyBuffer(r, settings.ready_capacity)
        callbacks = CallbackOutbox(r, ttl)
        return cls(r=r, sessions=sessions, records=RecordStore(r, ttl), outputs=outputs, callbacks=callbacks,
                   responses=ResponseStore(r, ttl), tasks=TaskStore(r, sessions, ready, outputs, callbacks, ttl),
                   ready=ready, results=ResultsStream(r, maxlen=settings.results_stream_maxlen,
                                                     marker_ttl_seconds=ttl, layout=settings.blob_layout),
                   proxy_control=ProxyControlStore(r), stage_runs=StageRuns(r, settings.stage_lease_seconds))


__all__ = ["CallbackOutbox", "OutputStore", "ProxyControlStore", "ReadyBuffer", "RecordStore", "ResponseStore", "ResultsStream",
           "SessionStore", "StageRuns", "Stores", "TaskStore"]
