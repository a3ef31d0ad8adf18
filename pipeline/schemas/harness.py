"""What a task may set for a CLI harness preset (``agent.settings``), checked at submit.

The same options mean the same thing for every preset; each preset maps them onto its CLI's own
flags and settings files (``workers/harnesses/<preset>.py``). ``cli_settings`` is merged last
into the CLI's own settings file, for anything the common options do not cover.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
VERSION = re.compile(r"^\d+\.\d+\.\d+([-.+][0-9A-Za-z.-]+)?$")


class McpServer(BaseModel):
    """One MCP server: ``stdio`` (a command run inside the runtime), ``sse`` or ``http``
    (streamable HTTP) at a URL."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: Literal["stdio", "sse", "http"] = "stdio"
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fields_for_type(self) -> "McpServer":
        if not SERVER_NAME.fullmatch(self.name):
            raise ValueError(f"MCP server name {self.name!r}: letters, digits, '-' and '_' only")
        if self.type == "stdio" and (not self.command or self.url):
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs 'command' and no 'url'")
        if self.type != "stdio" and (not self.url or self.command):
            raise ValueError(f"MCP server {self.name!r}: an {self.type} server needs 'url' and no 'command'")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: url must be http(s)")
        return self


class HarnessOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: StrictInt | None = Field(default=None, ge=1, le=10_000)
    reasoning_effort: Literal["low", "medium", "high"] | None = None  # thinking budget, where the CLI has one
    mcp_servers: list[McpServer] = Field(default_factory=list)
    skills_dir: str | None = None  # a folder inside the runtime holding SKILL.md folders
    cli_settings: dict[str, Any] = Field(default_factory=dict)  # merged into the CLI's own settings file
    extra_args: list[str] = Field(default_factory=list)  # appended to the CLI's command line
    version: str | None = None  # the CLI version this task needs (checked against the installed one)
    max_output_tokens: StrictInt | None = Field(default=None, ge=1)  # where the CLI can cap it itself

    @model_validator(mode="after")
    def _checks(self) -> "HarnessOptions":
        if self.version and not VERSION.fullmatch(self.version):
            raise ValueError(f"version {self.version!r}: expected a release such as 1.2.3")
        names = [s.name for s in self.mcp_servers]
        if len(set(names)) != len(names):
            raise ValueError("mcp_servers: names must be unique")
        if self.skills_dir and ("\0" in self.skills_dir or ".." in self.skills_dir.split("/")):
            raise ValueError(f"skills_dir {self.skills_dir!r} must not contain '..' or NUL")
        return self
