"""The harness tools folder (``polar tools install``): node copied from the host, CLIs installed
by npm with relative links only, so the folder works wherever it is mounted (/polar/tools)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.harness_tools import ToolsInstallError, install

FIXTURE_CLI = Path(__file__).resolve().parents[1] / "fixtures" / "polar-hello-cli"


@pytest.fixture(scope="module")
def cli_tarball(tmp_path_factory) -> Path:
    if not shutil.which("npm"):
        pytest.skip("npm is not installed")
    out = tmp_path_factory.mktemp("pack")
    subprocess.run(["npm", "pack", str(FIXTURE_CLI), "--pack-destination", str(out)], check=True,
                   capture_output=True)
    return next(out.glob("*.tgz"))


def test_node_alone_is_copied_and_runs_from_the_folder(tmp_path):
    if not shutil.which("node"):
        pytest.skip("node is not installed")
    manifest = install(tmp_path / "tools")
    node = tmp_path / "tools" / "bin" / "node"
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True).stdout.strip()
    assert manifest["node"] == version and version.startswith("v")
    assert not node.is_symlink()  # a copy: a link to /usr/bin/node would dangle in a container
    before = node.stat().st_mtime_ns
    install(tmp_path / "tools")  # again: nothing to copy
    assert node.stat().st_mtime_ns == before


def test_a_cli_from_a_tarball_gets_relative_links_that_survive_a_move(tmp_path, cli_tarball):
    manifest = install(tmp_path / "tools", [str(cli_tarball)])
    assert "polar-hello" in manifest["bins"] and str(cli_tarball) in manifest["packages"]
    link = tmp_path / "tools" / "bin" / "polar-hello"
    assert not os.path.isabs(os.readlink(link))
    moved = tmp_path / "elsewhere"
    (tmp_path / "tools").rename(moved)  # as a mount at /polar/tools moves it
    assert (moved / "bin" / "polar-hello").resolve().is_file()


def test_a_cli_installed_from_a_folder_is_refused_because_it_would_dangle(tmp_path, cli_tarball):
    with pytest.raises(ToolsInstallError, match="outside the tools folder"):
        install(tmp_path / "tools", [str(FIXTURE_CLI)])


@pytest.mark.parametrize("spec", ["--registry=http://evil", "-g", "", "a\nb"])
def test_specs_that_npm_would_read_as_options_are_refused(tmp_path, spec):
    with pytest.raises(ToolsInstallError, match="not an npm package spec"):
        install(tmp_path / "tools", [spec])
    assert not (tmp_path / "tools").exists()  # refused before anything was made


def test_a_host_without_node_gets_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolsInstallError, match="node is not installed"):
        install(tmp_path / "tools")
