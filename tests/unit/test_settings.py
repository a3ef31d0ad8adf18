"""Settings are typed from POLAR_* variables; a misspelt variable or a bad value is an error that
names the variable; only the CLI's client commands read a running `polar up`."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.errors import ConfigError
from pipeline.settings import Settings


def test_values_are_typed_from_the_environment():
    s = Settings.from_env({"POLAR_READY_CAPACITY": "3", "POLAR_CANCEL_POLL_SECONDS": "0.5",
                           "POLAR_TASK_EVENTS": "true", "POLAR_HOME": "/tmp/x", "POLAR_UPSTREAM_MODEL": ""})
    assert s.ready_capacity == 3 and s.cancel_poll_seconds == 0.5
    assert s.task_events is True  # a bool reads "true" as True (the default is False)
    assert s.home == Path("/tmp/x") and s.upstream_model is None  # empty = unset


def test_a_misspelt_variable_is_refused_by_name_with_a_suggestion():
    with pytest.raises(ConfigError, match="POLAR_READY_CAPACTY.*did you mean POLAR_READY_CAPACITY"):
        Settings.from_env({"POLAR_READY_CAPACTY": "3"})


def test_variables_that_are_not_settings_are_left_alone():
    # What a runtime injects into an agent's environment, and the reference server's own.
    Settings.from_env({"POLAR_SESSION_ID": "s", "POLAR_INSTRUCTION": "x", "POLAR_REFSERVER_NAME": "tiny"})


@pytest.mark.parametrize("name, value", [("POLAR_READY_CAPACITY", "many"), ("POLAR_READY_CAPACITY", "0"),
                                         ("POLAR_TASK_EVENTS", "perhaps")])
def test_a_bad_value_names_the_variable(name, value):
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


def test_redis_url_falls_back_to_REDIS_URL():
    assert Settings.from_env({"REDIS_URL": "redis://h:1/0"}).redis_url == "redis://h:1/0"
    both = {"REDIS_URL": "redis://h:1/0", "POLAR_REDIS_URL": "redis://p:2/0"}
    assert Settings.from_env(both).redis_url == "redis://p:2/0"


def test_dot_env_file_is_read(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("POLAR_READY_CAPACITY=5\nPOLAR_ADMIN_TOKEN=t0k\n")
    monkeypatch.chdir(tmp_path)
    for name in ("POLAR_READY_CAPACITY", "POLAR_ADMIN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    s = Settings.from_env()
    assert s.ready_capacity == 5 and s.secret("admin_token") == "t0k"
    assert "t0k" not in repr(s) and "t0k" not in str(s.model_dump())  # secrets never print
    (tmp_path / ".env").write_text("POLAR_READY_CAPASITY=5\n")
    with pytest.raises(ConfigError, match="POLAR_READY_CAPASITY"):
        Settings.from_env()


def test_to_env_reproduces_the_settings_in_a_child():
    s = Settings(home=Path("/tmp/h"), redis_url="redis://x:1/0", ready_capacity=2, task_events=False,
                 api_token="secret-api")
    assert Settings.from_env(s.to_env()) == s


def test_replace_validates():
    s = Settings(home=Path("/tmp/h"))
    assert s.replace(ready_capacity=7).ready_capacity == 7
    with pytest.raises(ValidationError, match="ready_capacity"):
        s.replace(ready_capacity=0)


def test_services_do_not_read_a_running_stack(tmp_path, monkeypatch):
    """A production process takes its configuration from its environment only: a developer's
    `polar up` state file next to it changes nothing (infra/cli/state.py reads it for clients)."""
    import json
    import os

    from infra.cli.state import client_settings

    (tmp_path / "up.json").write_text(json.dumps({"pid": os.getpid(), "api_url": "http://127.0.0.1:1"}))
    monkeypatch.setenv("POLAR_HOME", str(tmp_path))
    monkeypatch.delenv("POLAR_API_URL", raising=False)
    assert Settings.from_env().api_url != "http://127.0.0.1:1"
    assert client_settings().api_url == "http://127.0.0.1:1"
    monkeypatch.setenv("POLAR_API_URL", "http://explicit:2")
    assert client_settings().api_url == "http://explicit:2"  # an explicit variable wins


def test_a_redis_url_that_is_no_redis_url_is_refused_by_its_variables_name():
    """redis-py's ValueError surfaced as a traceback from the first command that connected."""
    for env in ({"POLAR_REDIS_URL": "notaurl"}, {"REDIS_URL": "http://h"}):
        with pytest.raises(ConfigError, match=r"POLAR_REDIS_URL \(or REDIS_URL\): .*must be a redis://, rediss:// "
                                              "or unix:// URL") as info:
            Settings.from_env(env)
        assert "POLAR_POLAR" not in str(info.value)
    assert Settings.from_env({"POLAR_REDIS_URL": "unix:///run/redis.sock"}).redis_url == "unix:///run/redis.sock"
