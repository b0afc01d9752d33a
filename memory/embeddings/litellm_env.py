"""The one way Pinch imports litellm: offline, whoever imports it first.

Imported bare, litellm fetches its model price list and Anthropic beta headers from GitHub and
may download tokenizer files. The environment set here keeps every import on the copies bundled
in the wheel. Both users (memory.embeddings.providers and agent.model.litellm_client) go through
`import_litellm`, so the settings no longer depend on which of them runs first. Values the owner
set in the environment are kept.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

OFFLINE_ENVIRONMENT = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
}


def import_litellm() -> Any:
    """The litellm module, imported with the offline settings (slow the first time: ~2.5 s).

    Raises ImportError when litellm is not installed."""
    for name, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    tokenizers = bundled_tokenizers_dir()
    if tokenizers is not None:
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(tokenizers))
    litellm: Any = importlib.import_module("litellm")
    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banner on every error
    route_litellm_logs()
    return litellm


LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def route_litellm_logs() -> None:
    """Send litellm's log records through Pinch's logging instead of litellm's own handler.

    litellm attaches a handler that prints INFO lines ("LiteLLM completion() model= …") to
    stdout, where they would land in the middle of `pinch chat`'s replies and skip the
    redaction Pinch's handlers apply. Its loggers lose that handler, propagate to the root
    logger (Pinch's file or console handler, redacted) and log WARNING and up, unless
    `LITELLM_LOG` names a level."""
    wanted = os.environ.get("LITELLM_LOG", "").strip().upper()
    level = logging.getLevelNamesMapping().get(wanted, logging.WARNING)
    for name in LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(level)


def bundled_tokenizers_dir() -> Path | None:
    """The tokenizer files inside the litellm wheel, found without importing litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None
