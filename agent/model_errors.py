"""Errors a model call can end in, each worded as advice: what went wrong, what to set.

`str(error)` is one line fit to show the owner. No message carries an API key: server text is
quoted only for refused requests, and then with any configured key blanked out.

`transient` says whether the same request may succeed later or at another provider (rate limits,
server errors, timeouts, unreachable servers): a client retries the first three and a
`FallbackClient` moves on to its next model for all four. The rest (a missing or rejected key, an
unknown model, a refused request) need the owner to change something; retrying only repeats them.
"""

from __future__ import annotations

CONFIG_PATH = "~/.pinch/config.toml"
_OTHER_MODEL_HINT = f'choose another model with model = "ollama/llama3.2" in {CONFIG_PATH}'


class ModelError(Exception):
    transient = False

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(message)
        self.model = model


class MissingKeyError(ModelError):
    """Raised before any network call when the provider's key is not in the environment."""

    def __init__(self, env_names: list[str], *, model: str) -> None:
        if len(env_names) == 1:
            what = f"{env_names[0]} is not set: export it"
        else:
            what = f"{' / '.join(env_names)} are not set (needed by {model}): export them"
        super().__init__(f"{what}, or {_OTHER_MODEL_HINT}", model=model)
        self.env_names = env_names


class AuthenticationFailedError(ModelError):
    def __init__(self, *, model: str, url: str, status: int, key_source: str) -> None:
        super().__init__(
            f"{url} rejected the API key from {key_source} ({status}): check the key and its "
            f"permissions, or {_OTHER_MODEL_HINT}",
            model=model,
        )


class UnknownModelError(ModelError):
    def __init__(self, *, model: str, url: str) -> None:
        hint = f"check the model name in {CONFIG_PATH}"
        if model.startswith(("ollama/", "ollama_chat/")):
            hint = f"download it with `ollama pull {model.split('/', 1)[1]}`, or {hint}"
        super().__init__(f'{url} does not know the model "{model}" (404): {hint}', model=model)


class RequestRefusedError(ModelError):
    """The server refused the request itself (400, 413, 422); `detail` is its own words."""

    def __init__(self, *, model: str, url: str, status: int, detail: str) -> None:
        super().__init__(f"{url} refused the request to {model} ({status}): {detail}", model=model)
        self.detail = detail


class ContextTooLongError(RequestRefusedError):
    """The prompt exceeds the model's context window: compact the history and try again."""


class RateLimitedError(ModelError):
    transient = True

    def __init__(self, *, model: str, url: str, attempts: int, retry_after: float | None) -> None:
        wait = f", asked to wait {retry_after:g} s" if retry_after else ""
        super().__init__(
            f"{url} is rate-limiting {model} (429 after {_attempts(attempts)}{wait}): "
            f"wait a minute, or add fallbacks = [...] in {CONFIG_PATH}",
            model=model,
        )
        self.retry_after = retry_after


class ServerError(ModelError):
    """5xx, overloaded, or a stream that broke off before its end."""

    transient = True

    def __init__(self, *, model: str, url: str, attempts: int, what: str) -> None:
        super().__init__(
            f"{url} failed for {model} ({what}, after {_attempts(attempts)}): the provider is "
            f"having trouble; try again later, or add fallbacks = [...] in {CONFIG_PATH}",
            model=model,
        )


class ServerUnreachableError(ModelError):
    transient = True

    def __init__(self, *, model: str, url: str, reason: str) -> None:
        hint = f"check api_base in {CONFIG_PATH} and the network"
        if model.startswith(("ollama/", "ollama_chat/")):
            hint = (
                f"is Ollama running? Start it with `ollama serve`, or set api_base in {CONFIG_PATH}"
            )
        super().__init__(f"Cannot reach {url} for {model} ({reason}): {hint}", model=model)


class ModelTimeoutError(ModelError):
    transient = True

    def __init__(self, *, model: str, url: str, timeout_s: float) -> None:
        super().__init__(
            f"{model} at {url} sent nothing for {timeout_s:g} s: try again, or raise "
            f"timeout_s in {CONFIG_PATH}",
            model=model,
        )


def _attempts(n: int) -> str:
    return "1 attempt" if n == 1 else f"{n} attempts"


def redact(text: str, secrets: list[str | None]) -> str:
    """`text` with every secret blanked out, on one line of at most 300 characters."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."
