"""Which body (and which recovery, for stages with side effects outside Redis) runs each stage.
Free of Celery: ``tasks.py`` registers these as tasks, tests call them through ``run_stage``."""

from __future__ import annotations

from pipeline.status import Stage
from workers.stages import callback, evaluate, init, postrun, run
from workers.stages.common import Body, Recover

BODIES: dict[Stage, tuple[Body, Recover | None]] = {
    Stage.INIT: (init.body, init.recover),
    Stage.RUN: (run.body, run.recover),
    Stage.POSTRUN: (postrun.body, None),
    Stage.EVALUATE: (evaluate.body, None),
    Stage.CALLBACK: (callback.body, None),
}
