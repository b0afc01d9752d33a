"""`pinch init`: the home, the workspace from the template, and the agent database.

Everything is private to the owner: folders 0700, files 0600, whatever the umask; a home that
other users can read is tightened (and `pinch init` says so).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from app.config import ConfigError, Settings
from common.private_files import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, make_private_dirs
from memory.store.db import open_database

CONFIG_TEMPLATE = """\
# Pinch configuration. Environment variables PINCH_* override these values
# (nested with __, e.g. PINCH_MEMORY__PRESET=keyword). Secrets such as API keys
# come only from the environment (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...).

# agent_id = "main"
# workspace = "~/.pinch/workspace"

[agent]
# model = "claude-sonnet-5-5"        # or "ollama/llama3.2", "openai/gpt-4.1-mini", ...
# fallback_models = []
# api_base = "http://localhost:11434"
# recall_mode = "escalate"           # off | triggers | escalate | always (Active Memory)
# recall_timeout_s = 8               # deep recall's hard limit; the reply never waits longer

[memory]
# preset = "pinch"                  # pinch | openclaw | keyword | vector
# extra_paths = ["~/notes"]          # more Markdown files or folders to index
# allow_hard_links = false          # true: also read/index files with several hard links
# vector_backend = "auto"           # auto (sqlite-vec if it loads, else numpy) | sqlite-vec | numpy
# watch_debounce_ms = 1500          # re-index a changed file after this long without changes

[memory.embedding]
# provider = "local"                # local (offline e5) | use | litellm | none
# model = ""                        # for litellm, e.g. "openai/text-embedding-3-small"

# Channels (pinch gateway). Tokens only from the environment: PINCH_TELEGRAM__BOT_TOKEN,
# PINCH_SLACK__BOT_TOKEN, PINCH_SLACK__APP_TOKEN. Uncomment a table header to use its keys.
# [owners]
# telegram = ["123456789"]          # your numeric Telegram user id
# slack = ["U0123ABCD"]             # your Slack member id
# [telegram]
# dm_policy = "pairing"             # pairing | allowlist | open | disabled
# allow_from = []                   # user ids allowed to DM (allowlist)
# drop_pending_updates = false      # true: ignore messages sent while Pinch was down
# [telegram.groups."-1001234567890"]
# require_mention = true
# [slack]
# dm_policy = "pairing"
# [gateway]
# owner_dm_scope = "main"           # main (one conversation everywhere) | per-channel
# collect_window_ms = 1500
# shutdown_grace_s = 20
# agent_lease_s = 20                # several gateways: an agent not renewed this long moves
# agent_heartbeat_s = 5             # how often a gateway renews its agents' leases
# [automations]
# misfire_grace_s = 3600            # a run missed by less than this runs late, with a note
# [heartbeat]
# every = "30m"                     # run HEARTBEAT.md's checklist; unset: no heartbeat
# [dreaming]
# enabled = true                    # nightly consolidation into MEMORY.md (03:00 your time)
# [projects.apollo]                 # memory prefers notes tagged <!-- project: apollo -->
# chats = ["-1001234567890:42"]     # Telegram chat (or chat:topic) / Slack channel ids
# folders = ["~/code/apollo"]       # `pinch chat` started here starts in the project
# [backup]
# every = "1d"                      # the gateway's scheduled backups; "" for none
# keep = 7                          # scheduled archives kept (pinch backup's are never pruned)
# path = "~/.pinch/backups"         # better: another disk

# Voice notes, photos and documents (README: "What the assistant understands").
# [voice]
# provider = "none"                 # litellm | command | none (voice notes saved, not heard)
# model = "whisper-1"               # litellm: whisper-1, groq/whisper-large-v3, ... (key from env)
# command = "~/.pinch/stt.sh {file}" # command: prints the text of {file} (e.g. whisper.cpp)
# max_duration_s = 600
# max_size_mb = 25
# timeout_s = 120
# [media]
# vision = "auto"                   # auto | on | off: send photos to the model as images
# max_images = 5                    # pictures looked at in one turn
# document_chars = 20000            # of a PDF / DOCX / text file's text in the turn
# [store]
# backend = "sqlite"                # sqlite (one file per agent) | postgres (not usable yet)
# pool_max_size = 8                 # postgres: connections per process; the DSN only from
#                                   # PINCH_STORE__DSN when it holds a password

# MCP servers: their tools become the assistant's (owner only unless shared = true).
# Secrets in env or headers as ${VARIABLE}, read from the environment. `pinch mcp list`.
# [mcp.servers.files]
# command = "npx"
# args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]
# env = { }                         # e.g. { GITHUB_TOKEN = "${GITHUB_TOKEN}" }
# timeout_s = 30                    # start-up and each call
# allow_tools = ["read_text_file", "search_files"]   # default: all; deny_tools = [...]
# lazy = false                      # true: start on first use
# [mcp.servers.remote]
# url = "https://example.com/mcp"   # streamable HTTP
# headers = { Authorization = "Bearer ${REMOTE_MCP_TOKEN}" }
# shared = false                    # true: paired people's chats too
# groups = []                       # groups it is offered in: ["telegram:-1001234567890"]
"""


def _write_private(path: Path, data: bytes) -> bool:
    """Create `path` (0600) holding `data`; False if it exists already — another process made it
    first (several `pinch gateway` processes starting at once on one home initialise it each)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return True


def tighten_home(home: Path) -> str | None:
    """Make an existing home (or workspace) folder 0700 if group or others could enter it; say
    what changed. A folder every user may write to (sticky and world-writable, like /tmp) is
    refused with a ConfigError instead: it is not the owner's to close."""
    try:
        mode = home.stat().st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(mode) or not mode & 0o077:
        return None
    if mode & stat.S_ISVTX and mode & stat.S_IWOTH:  # /tmp and its like: everyone's, not ours
        raise ConfigError(
            f"{home} is a folder every user may write to (like /tmp): Pinch keeps memory and "
            "chats only in a folder of your own. Choose another (--workspace, PINCH_HOME, or "
            "workspace = ... in config.toml); nothing was changed."
        )
    os.chmod(home, PRIVATE_DIR_MODE)
    return (
        f"tightened {home} from {stat.filemode(mode)} to drwx------ "
        "(other users could read your memory and chats)"
    )


def initialise(settings: Settings, template_dir: Path) -> list[str]:
    """Create whatever is missing; return one line per thing created or changed (empty: none)."""
    created: list[str] = []
    home = settings.home
    # The workspace may be a folder of the owner's outside the home: it holds the memory too.
    for folder in dict.fromkeys((home, settings.workspace_dir)):
        note = tighten_home(folder)
        if note:
            created.append(note)
    created += [str(d) + "/" for d in make_private_dirs(home)]
    config_text = CONFIG_TEMPLATE.encode("utf-8")
    if not settings.config_path.exists() and _write_private(settings.config_path, config_text):
        created.append(str(settings.config_path))
    ws = settings.workspace_dir
    for directory in (ws, ws / "memory"):
        created += [str(d) + "/" for d in make_private_dirs(directory)]
    for src in sorted(template_dir.glob("*.md")):
        dest = ws / src.name
        if not dest.exists() and _write_private(dest, src.read_bytes()):
            created.append(str(dest))
    if settings.store.backend == "postgres":  # the agent's schema, created and migrated
        from app.store_factory import open_postgres_store

        db = open_postgres_store(settings)
        db.close()
        if db.created:  # an existing schema (a migrated agent's, say) is only brought up to date
            created.append(f"schema {db.schema} in {db.shown_dsn}")
    elif not settings.database_path.exists():
        open_database(settings.database_path).close()
        created.append(str(settings.database_path))
    return [item if item.startswith("tightened") else f"created {item}" for item in created]
