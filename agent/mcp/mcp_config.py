"""`[mcp]` and `[mcp.servers.NAME]`: which MCP servers Pinch starts, and how their tools are
offered.

    [mcp.servers.files]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]

    [mcp.servers.github]
    url = "https://api.githubcopilot.com/mcp/"
    headers = { Authorization = "Bearer ${GITHUB_TOKEN}" }   # from the environment

A server is stdio (`command` + `args` + `env`) or streamable HTTP (`url` + `headers`). Secrets
never live in config.toml: a value of `env` or `headers` may name environment variables as
`${NAME}`, expanded when the server starts (app/config.py refuses a literal secret there).
"""

from __future__ import annotations

import os
import re
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SEPARATOR = "__"  # the model sees server `files`'s tool `read` as `files__read`
_SERVER_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingVariable(Exception):
    """A `${NAME}` in a server's env or headers names an unset environment variable."""


def expand(value: str, environ: dict[str, str] | None = None) -> str:
    """`value` with each `${NAME}` replaced by the environment variable NAME, or
    MissingVariable."""
    environ = dict(os.environ) if environ is None else environ

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise MissingVariable(f"the environment variable {name} is not set")
        return environ[name]

    return _REFERENCE.sub(one, value)


def references(value: str) -> list[str]:
    """The environment variables `value` names as `${NAME}`."""
    return _REFERENCE.findall(value)


class McpServerConfig(BaseModel):
    """`[mcp.servers.NAME]`: one MCP server."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None  # stdio: the program to run …
    args: list[str] = Field(default_factory=list)  # … its arguments
    env: dict[str, str] = Field(default_factory=dict)  # … extra environment (${VAR} expanded)
    url: str | None = None  # streamable HTTP: the endpoint …
    headers: dict[str, str] = Field(default_factory=dict)  # … sent with every request
    enabled: bool = True
    allow_tools: list[str] | None = None  # only these of its tools (None: all)
    deny_tools: list[str] = Field(default_factory=list)  # never these
    timeout_s: float = Field(default=30.0, gt=0, le=600)  # start-up, and each call
    shared: bool = False  # offered in paired people's direct chats too (never groups unless …)
    groups: list[str] = Field(default_factory=list)  # … listed here: "telegram:-100123"
    lazy: bool = False  # start on first use instead of with the gateway / chat

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "set either command (a stdio server: command, args, env) or url (a streamable "
                "HTTP server: url, headers), not both and not neither"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        return self

    @field_validator("groups")
    @classmethod
    def _group_form(cls, groups: list[str]) -> list[str]:
        for group in groups:
            if ":" not in group:
                raise ValueError(
                    f'{group!r}: name a group as channel:chat_id, e.g. "telegram:-100123"'
                )
        return groups

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def offers(self, tool: str) -> bool:
        """Whether the server's tool `tool` (its own name) is offered at all."""
        if tool in self.deny_tools:
            return False
        return self.allow_tools is None or tool in self.allow_tools


class McpConfig(BaseModel):
    """`[mcp]`: the MCP servers and how much of the prompt their tools may take."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    # Up to this many tokens of MCP tool schemas are sent in full; above it, the tools are
    # listed by name and one line, and the model fetches a schema with `mcp_tool_search`.
    max_schema_tokens: int = Field(default=1_500, ge=0, le=50_000)
    max_listing_tokens: int = Field(default=800, ge=100, le=20_000)  # cap of that listing
    max_result_chars: int = Field(default=15_000, ge=1_000, le=15_000)  # what enters the turn

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if len(name) > 24 or not _SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"server name {name!r}: use up to 24 letters, digits, '-' and single '_' "
                    f"(tools are named NAME{SEPARATOR}tool)"
                )
        return servers
