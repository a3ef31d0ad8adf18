"""The docker runtime's download, fed the answer Docker's engine gives for a path that is a
symbolic link: the link itself, as one tar member (``docker cp`` follows only with -L; podman,
which the runtime tests run on, resolves it in the container instead, so this answer is built
here). Copied out, the link would be followed on the worker's host: a session that made its
patch file a link to the worker's tokens.json had that file copied into the patch."""

from __future__ import annotations

import io
import tarfile

import pytest

from pipeline.errors import ExecError
from workers.runtimes import docker as docker_runtime
from workers.runtimes import docker_engine


class _DockerAnswers:
    """Docker's archive endpoint for one path: a tar stream and its stat header."""

    def __init__(self, member: tarfile.TarInfo, data: bytes = b"") -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.addfile(member, io.BytesIO(data) if data else None)
        self.archive, self.name = buf.getvalue(), member.name

    @property
    def api(self):
        return self

    def get_archive(self, container: str, path: str):
        return iter([self.archive]), {"name": self.name, "size": 0}


def runtime(tmp_path, answers) -> docker_runtime.DockerRuntime:
    key = f"tcp://answers-{id(answers)}:1"
    docker_engine._clients[docker_engine.client_key(key)] = answers  # (the runtime's client cache)
    return docker_runtime.DockerRuntime({"root": str(tmp_path / "s"), "container": "polar-sess", "network": "none",
                                         "workdir": "/polar/session/workspace", "docker_host": key})


def test_a_path_that_is_a_link_in_the_container_is_refused_not_followed_on_the_host(tmp_path):
    secret = tmp_path / "tokens.json"
    secret.write_text('{"api_token": "HOST-SECRET"}')
    link = tarfile.TarInfo("agent.patch")
    link.type, link.linkname = tarfile.SYMTYPE, str(secret)
    out = tmp_path / "grading" / "agent.patch"
    with pytest.raises(ExecError, match="symbolic link"):
        runtime(tmp_path, _DockerAnswers(link)).download("/polar/session/artifacts/agent.patch", str(out))
    assert not out.exists()


def test_a_regular_file_is_copied(tmp_path):
    member = tarfile.TarInfo("agent.patch")
    member.size = 5
    out = tmp_path / "grading" / "agent.patch"
    runtime(tmp_path, _DockerAnswers(member, b"diff\n")).download("/polar/session/artifacts/agent.patch", str(out))
    assert out.read_bytes() == b"diff\n"
