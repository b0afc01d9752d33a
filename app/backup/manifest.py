"""What a backup archive holds and how it is described: member names, the manifest, and which
files count as secrets.

An archive is one gzip-compressed tar file:

    config.toml                      the settings file (it never holds a secret)
    workspace/…                      every file of the workspace (memory files, inbox, skills)
    agents/<id>/agent.sqlite         a consistent snapshot of the agent's database
    agents/<id>/config.toml          an agent's own settings file (an agent archive's, below)
    secrets.env                      only with --include-secrets
    manifest.json                    last: versions, counts, and the sha256 of every file above
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.redact import is_secret_name

FORMAT = 2  # the manifest's layout; a reader refuses a larger one
# An archive holds one agent. The default agent's ("home") is restored into an empty home, with
# the installation's config.toml; another agent's ("agent", format 2, so that a Pinch older than
# agents refuses it) into <home>/agents/<id>/ of any home, beside the agents there.
HOME_SCOPE, AGENT_SCOPE = "home", "agent"
MANIFEST_NAME = "manifest.json"
CONFIG_NAME = "config.toml"
SECRETS_NAME = "secrets.env"
WORKSPACE_DIR = "workspace"
AGENTS_DIR = "agents"
ARCHIVE_SUFFIX = ".tar.gz"
MANUAL_PREFIX = "pinch-backup-"
SCHEDULED_PREFIX = "pinch-backup-auto-"  # only these are pruned to `[backup] keep`

# Files of the workspace left out unless --include-secrets: credentials by their usual names.
SECRET_FILE_PATTERNS = (
    ".env",
    ".env.*",
    "*.env",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.kdbx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
)


def is_secret_file(name: str) -> bool:
    """Whether a file called `name` (its last part) holds credentials by its usual name."""
    lower = name.lower()
    return any(fnmatch.fnmatchcase(lower, pattern) for pattern in SECRET_FILE_PATTERNS)


def secret_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secrets Pinch reads from the environment: PINCH_* tokens and keys, and model API
    keys (*_API_KEY), by name."""
    env = os.environ if environ is None else environ
    return {
        name: value
        for name, value in sorted(env.items())
        if value
        and is_secret_name(name)
        and (name.upper().startswith("PINCH_") or name.upper().endswith("_API_KEY"))
    }


def secrets_env_text(secrets: Mapping[str, str]) -> str:
    """A shell-sourceable file (`set -a; . secrets.env; set +a`) of `secrets`."""
    lines = ["# Pinch secrets from a backup: load with `set -a; . ./secrets.env; set +a`"]
    lines += [f"{name}={shlex.quote(value)}" for name, value in secrets.items()]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class DatabaseEntry:
    """One database snapshot: its counts (None: no such table yet) and applied migrations."""

    counts: dict[str, int | None]
    migrations: dict[str, list[str]]
    sqlite_version: str


@dataclass
class Manifest:
    """The description of one archive (manifest.json)."""

    pinch_version: str
    created_at: str  # UTC, ISO 8601
    agent_id: str
    source_home: str
    workspace_external: bool  # the workspace was outside the home
    include_secrets: bool
    files: dict[str, FileEntry] = field(default_factory=dict)
    databases: dict[str, DatabaseEntry] = field(default_factory=dict)
    left_out: dict[str, list[str]] = field(default_factory=dict)  # why → paths
    scope: str = HOME_SCOPE  # HOME_SCOPE or AGENT_SCOPE (see FORMAT)
    format: int = 1  # 2 for an agent archive (see FORMAT)

    def counts(self) -> dict[str, int]:
        """Each count summed over the databases, and the number of workspace files."""
        total: dict[str, int] = {}
        for db in self.databases.values():
            for name, value in db.counts.items():
                total[name] = total.get(name, 0) + (value or 0)
        total["workspace_files"] = sum(1 for n in self.files if n.startswith(WORKSPACE_DIR + "/"))
        return total

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "format": 2 if self.scope == AGENT_SCOPE else 1,
            "scope": self.scope,
            "pinch_version": self.pinch_version,
            "created_at": self.created_at,
            "agent_id": self.agent_id,
            "source_home": self.source_home,
            "workspace_external": self.workspace_external,
            "include_secrets": self.include_secrets,
            "counts": self.counts(),
            "databases": {
                name: {
                    "counts": db.counts,
                    "migrations": db.migrations,
                    "sqlite_version": db.sqlite_version,
                }
                for name, db in sorted(self.databases.items())
            },
            "left_out": self.left_out,
            "files": {
                name: {"sha256": f.sha256, "size": f.size} for name, f in sorted(self.files.items())
            },
        }
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse manifest.json; ValueError (one line) when it is not one this code can read."""
        try:
            data = json.loads(text)
            fmt = int(data["format"])
        except (ValueError, KeyError, TypeError):
            raise ValueError("its manifest.json is not a Pinch backup manifest") from None
        if fmt > FORMAT:
            raise ValueError(
                f"it was made by a newer Pinch (manifest format {fmt}; this version reads "
                f"{FORMAT}): upgrade Pinch, then restore again"
            )
        try:
            return cls(
                pinch_version=str(data["pinch_version"]),
                created_at=str(data["created_at"]),
                agent_id=str(data["agent_id"]),
                source_home=str(data["source_home"]),
                workspace_external=bool(data["workspace_external"]),
                include_secrets=bool(data["include_secrets"]),
                files={
                    str(n): FileEntry(str(f["sha256"]), int(f["size"]))
                    for n, f in data["files"].items()
                },
                databases={
                    str(n): DatabaseEntry(
                        {str(k): (None if v is None else int(v)) for k, v in d["counts"].items()},
                        {str(k): [str(x) for x in v] for k, v in d["migrations"].items()},
                        str(d["sqlite_version"]),
                    )
                    for n, d in data["databases"].items()
                },
                left_out={str(k): [str(x) for x in v] for k, v in data["left_out"].items()},
                scope=AGENT_SCOPE if data.get("scope") == AGENT_SCOPE else HOME_SCOPE,
                format=fmt,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError("its manifest.json is incomplete or malformed") from None
