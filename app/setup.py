"""`pinch init`: the home, the workspace from the template, and the agent database."""

from __future__ import annotations

import shutil
from pathlib import Path

from app.config import Settings
from memory.db import open_database

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

[memory.embedding]
# provider = "local"                # local (offline e5) | use | litellm | none
# model = ""                        # for litellm, e.g. "openai/text-embedding-3-small"
"""


def initialise(settings: Settings, template_dir: Path) -> list[str]:
    """Create whatever is missing; return what was created (empty when nothing was)."""
    created: list[str] = []
    home = settings.home
    if not home.exists():
        home.mkdir(parents=True)
        created.append(str(home))
    if not settings.config_path.exists():
        settings.config_path.write_text(CONFIG_TEMPLATE, encoding="utf-8")
        created.append(str(settings.config_path))
    ws = settings.workspace_dir
    for directory in (ws, ws / "memory"):
        if not directory.exists():
            directory.mkdir(parents=True)
            created.append(str(directory) + "/")
    for src in sorted(template_dir.glob("*.md")):
        dest = ws / src.name
        if not dest.exists():
            shutil.copyfile(src, dest)
            created.append(str(dest))
    if not settings.database_path.exists():
        open_database(settings.database_path).close()
        created.append(str(settings.database_path))
    return created
