"""One module per stage (init, run, postrun, evaluate, callback) plus the redelivery guard
(`common.py`). `tasks.py` registers them on the Celery app; workers import it by name
(`-I workers.stages.tasks`), so importing a stage module alone needs no broker."""
