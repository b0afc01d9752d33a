"""Every prompt the agent sends is a Jinja2 template in agent/templates/; this renders them."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined


@lru_cache(maxsize=1)
def _environment() -> Environment:
    # Prompts are plain text, not HTML: no autoescaping. StrictUndefined turns a typo in a
    # variable name into an error instead of a silently empty prompt.
    return Environment(
        loader=PackageLoader("agent", "templates"),
        autoescape=False,
        undefined=StrictUndefined,
        keep_trailing_newline=False,
    )


def render(template: str, /, **values: Any) -> str:
    """`agent/templates/<template>.j2` rendered with `values`."""
    return _environment().get_template(f"{template}.j2").render(**values)
