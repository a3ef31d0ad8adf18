"""The harness tools folder (``POLAR_TOOLS_DIR``, default ``$POLAR_HOME/tools``): Node.js and the
harness CLIs, installed once on the worker host and mounted read-only at ``/polar/tools`` into
every container, so task images (SWE-bench's, anyone's) need no change to run Codex CLI, Claude
Code, Gemini CLI and the rest.

Layout -- what ``npm install --global --prefix`` makes, plus the node binary beside it:

    tools/bin/node                      the host's node, copied (it needs only glibc and libstdc++)
    tools/bin/<cli> -> ../lib/node_modules/<package>/<entry>   relative links, valid at any mount
    tools/lib/node_modules/<package>/
    tools/manifest.json                 node version and what was installed

``runtimes`` put ``/polar/tools/bin`` first on PATH, so an ``#!/usr/bin/env node`` script finds
this node even in an image without one. Installing needs the npm registry (or a tarball); running
needs nothing from anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from pipeline.errors import PolarError


class ToolsInstallError(PolarError):
    """The tools folder could not be made (no node, npm failed, a refused package spec)."""


def _check_spec(spec: str) -> str:
    # A spec is handed to npm as an argument: one starting with '-' would be read as an option.
    if not spec or spec.startswith("-") or "\0" in spec or "\n" in spec:
        raise ToolsInstallError(f"package {spec!r}: not an npm package spec")
    return spec


def _node_version(node: str) -> str:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise ToolsInstallError(f"{node} --version failed: {out.stderr.strip()}")
    return out.stdout.strip()


def install(tools_dir: Path, packages: Sequence[str] = (), node: str | None = None, npm: str | None = None,
            timeout: float = 1800) -> dict:
    """Copy node into ``tools_dir/bin`` and ``npm install --global`` the packages there; returns
    the manifest. Idempotent: node is copied again only when it changed."""
    specs = [_check_spec(p) for p in packages]
    node = node or shutil.which("node")
    if not node:
        raise ToolsInstallError("node is not installed on this host (apt install nodejs, or put node on PATH)")
    source = Path(node).resolve()
    bin_dir = tools_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / "node"
    if not target.exists() or target.stat().st_size != source.stat().st_size \
            or target.stat().st_mtime < source.stat().st_mtime:
        tmp = bin_dir / ".node.tmp"
        shutil.copy2(source, tmp)
        os.replace(tmp, target)  # a container running the old node keeps its copy
    manifest_path = tools_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"packages": []}
    manifest["node"] = _node_version(str(target))
    if specs:
        npm = npm or shutil.which("npm")
        if not npm:
            raise ToolsInstallError("npm is not installed on this host")
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
               "npm_config_audit": "false"}
        done = subprocess.run([npm, "install", "--global", "--prefix", str(tools_dir), "--", *specs],
                              capture_output=True, text=True, timeout=timeout, env=env)
        if done.returncode != 0:
            raise ToolsInstallError(f"npm install failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        manifest["packages"] = sorted(set(manifest["packages"]) | set(specs))
    manifest["bins"] = sorted(p.name for p in bin_dir.iterdir() if not p.name.startswith("."))
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    _check_links_stay_inside(tools_dir)
    return manifest


def _check_links_stay_inside(tools_dir: Path) -> None:
    """Every command and package must resolve inside the folder: a link into the host (what npm
    makes for a package installed from a folder) would dangle once mounted at /polar/tools."""
    root = tools_dir.resolve()
    modules = tools_dir / "lib" / "node_modules"
    entries = list((tools_dir / "bin").iterdir())
    if modules.is_dir():
        for entry in modules.iterdir():
            entries += list(entry.iterdir()) if entry.name.startswith("@") and entry.is_dir() else [entry]
    for entry in entries:
        real = entry.resolve()
        if entry.is_symlink() and (os.path.isabs(os.readlink(entry)) or not real.is_relative_to(root)):
            raise ToolsInstallError(
                f"{entry.relative_to(tools_dir)} resolves to {real}, outside the tools folder: install from the "
                "registry or from a tarball (npm pack a folder first), not from a folder")


# The harness presets' CLIs, pinned: (npm package, version, command). Versions tested by CI.
HARNESS_CLIS = {
    "codex": ("@openai/codex", "0.171.0", "codex"),
    "claude_code": ("@anthropic-ai/claude-code", "2.1.197", "claude"),
    "gemini_cli": ("@google/gemini-cli", "0.61.0", "gemini"),
    "qwen_code": ("@qwen-code/qwen-code", "0.15.10", "qwen"),
    "opencode": ("opencode-ai", "1.18.33", "opencode"),
    "pi": ("@mariozechner/pi-coding-agent", "0.73.1", "pi"),
}


def harness_specs(tools_dir: Path, names: Sequence[str], pins: dict[str, str]) -> list[str]:
    """npm specs (``package@version``) of the named presets (all when none), pins overriding,
    that the tools folder does not hold at that version yet."""
    unknown = [n for n in [*names, *pins] if n not in HARNESS_CLIS]
    if unknown:
        raise ToolsInstallError(f"unknown harness {', '.join(unknown)}; expected {', '.join(HARNESS_CLIS)}")
    have = installed_versions(tools_dir)
    wanted = {n: pins.get(n, HARNESS_CLIS[n][1]) for n in (names or HARNESS_CLIS)}
    return [f"{HARNESS_CLIS[n][0]}@{version}" for n, version in wanted.items() if have[n] != version]


def installed_versions(tools_dir: Path) -> dict[str, str | None]:
    """Each preset's CLI version as its package.json in the tools folder says (None: absent)."""
    out: dict[str, str | None] = {}
    for name, (package, _, _) in HARNESS_CLIS.items():
        meta = tools_dir / "lib" / "node_modules" / package / "package.json"
        out[name] = json.loads(meta.read_text()).get("version") if meta.exists() else None
    return out


def cli_version(tools_dir: Path, name: str, timeout: float = 60) -> tuple[bool, str]:
    """Run the preset's CLI ``--version`` from the tools folder, as a runtime would."""
    command = HARNESS_CLIS[name][2]
    env = {"PATH": f"{tools_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tools_dir / ".doctor-home"), "LANG": "C.UTF-8",
           "TERM": "dumb", "NO_UPDATE_NOTIFIER": "1"}
    try:
        done = subprocess.run([str(tools_dir / "bin" / command), "--version"], capture_output=True, text=True,
                              timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    text = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return done.returncode == 0, text[-1] if text else f"exit {done.returncode}"
