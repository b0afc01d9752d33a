"""Which database holds the agent's stores (`[store] backend`): the check the composition root
and every `pinch` command make before opening anything (light: it imports no driver). The
stores themselves are built by app/store_factory.py.

    check_store_backend(settings)          # ConfigError (one line) if the backend is incomplete

While a store has no PostgreSQL implementation (memory/store/backends.py), `backend =
"postgres"` is refused at start with the list of what is missing: Pinch never runs half on one
database and half on another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.config import ConfigError
from memory.store.backends import missing_stores

if TYPE_CHECKING:
    from app.config import Settings


# Backends the composition root hands to the memory index, the agent and the gateway. A backend
# with every store implemented is still refused until it is wired here.
WIRED_BACKENDS = ("sqlite", "postgres")


def check_store_backend(settings: Settings) -> None:
    """Refuse a backend some store has no implementation on yet, or that the composition root
    does not wire yet, naming what is missing (one line)."""
    backend = settings.store.backend
    missing = missing_stores(backend)
    if not missing and backend in WIRED_BACKENDS:
        return
    parts = [f"no {backend} implementation of {', '.join(missing)}"] if missing else []
    if backend not in WIRED_BACKENDS:
        parts.append("the memory index, agent and gateway still open the SQLite file")
    raise ConfigError(
        f'[store] backend = "{backend}" cannot run yet: {"; ".join(parts)}. '
        'Set backend = "sqlite" (the default) for now.'
    )
