"""Where the owner's Pinch home is, as messages name it (for advice such as "set … in
~/.pinch/config.toml"). Reads only the environment."""

from __future__ import annotations

import os


def config_file_hint() -> str:
    """Where the owner's config.toml is, as advice in messages: `$PINCH_HOME/config.toml` when
    PINCH_HOME moves the home (app/config.py), else ~/.pinch/config.toml."""
    home = os.environ.get("PINCH_HOME", "").strip()
    return f"{home.rstrip('/')}/config.toml" if home else "~/.pinch/config.toml"
