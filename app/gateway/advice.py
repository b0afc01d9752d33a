"""Advice fit for a chat: a failure's advice (worded for the owner at the server) may name files
on the server — config.toml, the workspace — which a Telegram or Slack chat must not see. The log
and the terminal keep the whole advice."""

from __future__ import annotations

import re

# An absolute or home-relative path; not the path part of a URL (it follows ':', '/' or a host).
_PATH = re.compile(r"(?<![\w:/.~-])~?/[^\s,;:()'\"`]+")


def without_server_paths(advice: str) -> str:
    """`advice` with each file path on the server replaced by words that name no path."""

    def replace(match: re.Match[str]) -> str:
        path = match.group()
        stripped = path.rstrip(".")
        name = stripped.rstrip("/").rsplit("/", 1)[-1]
        words = "config.toml on the server" if name == "config.toml" else "(a path on the server)"
        return words + path[len(stripped) :]

    return _PATH.sub(replace, advice)
