"""Every Lua script the project runs, registered the same way (``bind``).

A store binds the scripts it needs to its client; the result is redis-py's ``Script``, which
calls EVALSHA and reloads the source when Redis answers NOSCRIPT (after a restart). The proxy's
hot path sends EVALSHA itself inside its one round trip and reloads with ``source`` the same
way. Scripts touch only keys passed in KEYS. Most share a hash tag; the stage scripts
(STAGE_BEGIN, STAGE_FINISH, STAGE_SEND) span a session, the stage leases and a stage queue, so
broker and state live on one Redis (as kombu's Redis transport needs anyway: no Cluster).

Modules by what the scripts keep: ``sessions``, ``stages`` (leases and a stage's two ends),
``ready``, ``delivery`` (callback outbox, results stream), ``tasks``, ``weight_sync``; how a
script is sent is ``script``. Callers import the package: ``lua.SESSION_TRANSITION``.
"""

from __future__ import annotations

from pipeline.stores.lua.delivery import (  # noqa: F401
    CALLBACK_CLAIM,
    RESULTS_PUBLISH_ONCE,
    RESULTS_TOUCH,
)
from pipeline.stores.lua.ready import (  # noqa: F401
    INIT_ADMIT,
    READY_CLAIM,
    READY_CLAIM_START,
    READY_PUSH,
    READY_RESERVE,
)
from pipeline.stores.lua.script import Lua, after_reads, bind, execute, queue  # noqa: F401
from pipeline.stores.lua.sessions import (  # noqa: F401
    SESSION_BEGIN_CALL,
    SESSION_PARK,
    SESSION_TRANSITION,
)
from pipeline.stores.lua.stages import (  # noqa: F401
    LEASE_ACQUIRE,
    LEASE_CONFIRM,
    LEASE_RELEASE,
    LEASE_RENEW,
    LEASE_RENEW_MANY,
    LEASE_TAKE_EXPIRED,
    STAGE_BEGIN,
    STAGE_FINISH,
    STAGE_SEND,
)
from pipeline.stores.lua.tasks import (  # noqa: F401
    TASK_FINISH,
    TASK_STATE_CAS,
)
from pipeline.stores.lua.weight_sync import (  # noqa: F401
    PROXY_PAUSE_HOLD,
    PROXY_PAUSE_RELEASE,
)

# Every script by name: ``execute`` loads them all after a Redis restart (NOSCRIPT).
ALL = {value.name: value for value in list(globals().values()) if isinstance(value, Lua)}
