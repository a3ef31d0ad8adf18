"""The reference model's gunicorn worker exits once on a quick shutdown: Ctrl-C sends the worker
SIGINT and its master SIGQUIT, and the second ``SystemExit`` landed in torch's exit handler
during the interpreter's shutdown, printing a traceback in model.log."""

from __future__ import annotations

import types

import pytest

from infra.http_errors import JsonErrorThreadWorker


def test_the_second_quit_signal_does_not_raise_again():
    worker = object.__new__(JsonErrorThreadWorker)  # no gunicorn arbiter: only what handle_quit reads
    shut: list[bool] = []
    worker.tpool = types.SimpleNamespace(shutdown=lambda wait: shut.append(wait))
    worker.cfg = types.SimpleNamespace(worker_int=lambda w: None)
    with pytest.raises(SystemExit):
        worker.handle_quit(3, None)  # SIGQUIT: the exit starts
    assert worker.handle_quit(2, None) is None  # SIGINT during the shutdown: nothing more
    assert shut == [False] and worker.alive is False
