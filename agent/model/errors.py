"""Errors a model call can end in, each worded as advice: what went wrong, what to set.

`str(error)` is one line fit to show the owner. No message carries an API key: server text is
quoted (`quote`) through common.redact, which blanks every configured key and anything shaped like
one.

`transient` says whether the same request may succeed later or at another provider (rate limits,
server errors, timeouts, unreachable servers): a client retries the first three and a
`FallbackClient` moves on to its next model for all four. The rest (a missing or rejected key, an
unknown model, a refused request) need the owner to change something; retrying only repeats them.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from common.home import config_file_hint
from common.redact import redact


def _other_model_hint() -> str:
    return f'choose another model with model = "ollama/llama3.2" in {config_file_hint()}'


def _api_base() -> str:
    return f"api_base in {config_file_hint()}"


class ModelError(Exception):
    transient = False

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(redact(message))  # whatever a subclass quotes, no key gets through
        self.model = model


class MissingKeyError(ModelError):
    """Raised before any network call when the provider's key is not in the environment."""

    def __init__(self, env_names: list[str], *, model: str) -> None:
        if len(env_names) == 1:
            what = f"{env_names[0]} is not set: export it"
        else:
            what = f"{' / '.join(env_names)} are not set (needed by {model}): export them"
        super().__init__(f"{what}, or {_other_model_hint()}", model=model)
        self.env_names = env_names


class AuthenticationFailedError(ModelError):
    def __init__(self, *, model: str, url: str, status: int, key_source: str) -> None:
        super().__init__(
            f"{url} rejected the API key from {key_source} ({status}): check the key and its "
            f"permissions, or {_other_model_hint()}",
            model=model,
        )


class UnknownModelError(ModelError):
    def __init__(self, *, model: str, url: str) -> None:
        hint = f"check the model name in {config_file_hint()}"
        if model.startswith(("ollama/", "ollama_chat/")):
            hint = f"download it with `ollama pull {model.split('/', 1)[1]}`, or {hint}"
        super().__init__(f'{url} does not know the model "{model}" (404): {hint}', model=model)


class UnknownProviderError(ModelError):
    """litellm cannot tell which provider serves the model name (checked before any request)."""

    def __init__(self, *, model: str) -> None:
        super().__init__(
            f'No provider is known for the model "{model}": name it as provider/model, e.g. '
            '"openai/gpt-4.1-mini", "gemini/gemini-2.5-flash" or "ollama/llama3.2" (model = … '
            f"under [agent] in {config_file_hint()})",
            model=model,
        )


class RequestRefusedError(ModelError):
    """The server refused the request itself (400, 413, 422); `detail` is its own words."""

    def __init__(self, *, model: str, url: str, status: int, detail: str) -> None:
        super().__init__(f"{url} refused the request to {model} ({status}): {detail}", model=model)
        self.detail = detail


class ContextTooLongError(RequestRefusedError):
    """The prompt exceeds the model's context window: compact the history and try again."""

    def __init__(self, *, model: str, url: str, status: int, detail: str) -> None:
        ModelError.__init__(
            self,
            f"{url} refused the request to {model} as too long ({status}: {detail}): send a "
            "shorter message or start a new session with /new, and check that context_window "
            f"in {config_file_hint()} is no bigger than the model's real window",
            model=model,
        )
        self.detail = detail


class BadResponseError(ModelError):
    """A 200 answer that is not the API's: a web page, an empty body, broken JSON, an event
    stream of something else. Usually api_base points at the wrong server (or a proxy's page);
    a fallback model is tried, the same server is not asked again."""

    transient = True

    def __init__(self, *, model: str, url: str, what: str, url_from: str | None = None) -> None:
        super().__init__(
            f"{url} answered {model} with something that is not the model API's format "
            f"({what}): check that {url_from or _api_base()} is the model API itself (not a "
            "web page or a proxy), or try again later",
            model=model,
        )


class RateLimitedError(ModelError):
    transient = True

    def __init__(self, *, model: str, url: str, attempts: int, retry_after: float | None) -> None:
        wait = f", asked to wait {retry_after:g} s" if retry_after else ""
        super().__init__(
            f"{url} is rate-limiting {model} (429 after {_attempts(attempts)}{wait}): "
            f"wait a minute, or add fallback_models = [...] under [agent] in {config_file_hint()}",
            model=model,
        )
        self.retry_after = retry_after


class ServerError(ModelError):
    """5xx, overloaded, or a stream that broke off before its end."""

    transient = True

    def __init__(
        self, *, model: str, url: str, attempts: int, what: str, broken: bool = False
    ) -> None:
        super().__init__(
            f"{url} failed for {model} ({what}, after {_attempts(attempts)}): the provider is "
            "having trouble; try again later, or add fallback_models = [...] under [agent] in "
            f"{config_file_hint()}",
            model=model,
        )
        self.broken_stream = broken  # the stream ended early, rather than reporting an error


class ServerUnreachableError(ModelError):
    transient = True

    def __init__(self, *, model: str, url: str, reason: str, url_from: str | None = None) -> None:
        # Nothing listens, or no such host: retrying for long would only delay the advice.
        self.refused = reason in ("connection refused", "host name not found")
        hint = f"check {url_from or _api_base()} and the network"
        if model.startswith(("ollama/", "ollama_chat/")):
            hint = (
                "is Ollama running? Start it with `ollama serve`, or set api_base in "
                f"{config_file_hint()}"
            )
        super().__init__(f"Cannot reach {url} for {model} ({reason}): {hint}", model=model)


class ModelTimeoutError(ModelError):
    transient = True

    def __init__(self, *, model: str, url: str, timeout_s: float) -> None:
        super().__init__(
            f"{model} at {url} did not finish answering within timeout_s = {timeout_s:g} s: "
            f"try again, or raise timeout_s in {config_file_hint()}",
            model=model,
        )


class ModelConnectTimeoutError(ModelTimeoutError):
    """No connection to the model's server could be made (or taken from the client's pool)
    within the connect timeout: the request never left, so it was retried; `host` is the
    server's host and port only (no path, query or user information: no secret)."""

    def __init__(self, *, model: str, host: str, connect_s: float, attempts: int) -> None:
        ModelError.__init__(
            self,
            f"Could not connect to the model server at {host} within {connect_s:g} s "
            f"({model}, {_attempts(attempts)}): the server is overloaded or unreachable; "
            "try again in a moment, or check it and the network",
            model=model,
        )


def server_host(url: str) -> str:
    """`url`'s host and port, for an error message: never its user information (a password),
    path or query (a key); a name that is no URL ("the openai API") as it is."""
    parts = urlsplit(url)
    if not parts.hostname:
        return url.split("?", 1)[0].split("@")[-1]
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def _attempts(n: int) -> str:
    return "1 attempt" if n == 1 else f"{n} attempts"


def quote(text: str, secrets: Iterable[str | None] = ()) -> str:
    """A server's `text` fit to show inside an error: secrets blanked (common.redact), on one
    line of at most 300 characters."""
    line = " ".join(redact(text, secrets).split())
    return line if len(line) <= 300 else line[:297] + "..."


def cut_off_notice(reason: str) -> str:
    """What the owner reads after an answer that stopped early (`reason`: why)."""
    return f'(The answer was cut off: {reason}. Ask again, or say "go on", for the rest.)'
