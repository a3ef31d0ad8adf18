"""Files in and out of a ``docker`` runtime's container, as tar archives through the engine's API
(``DockerRuntime`` takes these methods): a link arrives as a link and nothing is written through
one, and a download is bounded (a process still running in the container may keep writing)."""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.errors import ExecError
from workers.runtimes.paths import container_path

DOWNLOAD_MAX_BYTES = 256 * 2**20  # what one download may bring out of a container (a patch, a test log)


class ContainerFiles:
    name: str
    workdir: str
    _docker: Any

    def _run_quiet(self, argv: list[str]) -> int:
        raise NotImplementedError

    def upload(self, src: str, dst: str) -> None:
        target = container_path(self.workdir, dst)
        parent, base = target.rsplit("/", 1) if target.rstrip("/") else ("/", "")
        with tempfile.TemporaryFile() as buf:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(src, arcname=base)  # links stay links (tarfile does not follow them)
            buf.seek(0)
            self._put_archive(parent, target, buf.read())

    def write(self, dst: str, data: bytes) -> None:
        target = container_path(self.workdir, dst)
        parent, base = target.rsplit("/", 1) if target.rstrip("/") else ("/", "")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(base)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self._put_archive(parent, target, buf.getvalue())

    def _put_archive(self, parent: str, target: str, archive: bytes) -> None:
        if self._run_quiet(["mkdir", "-p", parent or "/"]) != 0:
            raise ExecError(f"cannot create {parent} in {self.name}")
        if not self._docker.api.put_archive(self.name, parent or "/", archive):
            raise ExecError(f"the engine refused the upload to {target}")

    def download(self, src: str, dst: str) -> None:
        import docker

        source = container_path(self.workdir, src)
        try:
            bits, stat = self._docker.api.get_archive(self.name, source)
        except docker.errors.NotFound:
            raise FileNotFoundError(src) from None
        chunks, received = [], 0
        for chunk in bits:  # held in memory: bounded, whatever a process still running in the container writes
            received += len(chunk)
            if received > DOWNLOAD_MAX_BYTES:
                raise ExecError(f"{src} in {self.name} is larger than {DOWNLOAD_MAX_BYTES // 2**20} MB: not copied")
            chunks.append(chunk)
        data = io.BytesIO(b"".join(chunks))
        target = Path(dst)
        with tarfile.open(fileobj=data) as tar, tempfile.TemporaryDirectory() as tmp:
            tar.extractall(tmp, filter=_links_stay_links)
            extracted = Path(tmp) / Path(stat["name"]).name
            if extracted.is_symlink():  # Docker hands a link over as one (podman resolves it in the container):
                # copied, it would be followed here -- to a file of the worker's host
                raise ExecError(f"{src} in {self.name} is a symbolic link: not copied")
            target.parent.mkdir(parents=True, exist_ok=True)
            if extracted.is_dir():
                shutil.copytree(extracted, target, dirs_exist_ok=True, symlinks=True)
            else:
                shutil.copy2(extracted, target)


def _links_stay_links(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """``data`` extraction (no absolute names, no '..', no devices, no hard links out), except that a
    symbolic link may point anywhere: it arrives as a link, like the host backends' copies, and
    nothing is ever written through it (the ``tar`` filter checks each member's real path)."""
    if member.issym():
        return tarfile.tar_filter(member, dest)
    return tarfile.data_filter(member, dest)
