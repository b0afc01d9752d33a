"""Files shared in Slack: downloaded with the bot token into the workspace inbox.

    attachment = await download_shared_file(session, file, token=..., inbox=inbox, ts=ts)

Slack's `url_private` links need `Authorization: Bearer <bot token>` (scope `files:read`);
without it Slack answers with its HTML sign-in page, which is reported, not saved. The token is
only ever sent to Slack's own hosts (or the configured API host, for tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from channels.base import Attachment, AttachmentKind

_MB = 1024 * 1024


@dataclass(frozen=True)
class Inbox:
    """Where files go: `<dir>/YYYY-MM-DD/<file id>-<name>`, reported as `<rel>/YYYY-MM-DD/…`."""

    dir: Path
    rel: str
    max_mb: int
    api_host: str  # the Web API's host; the token may go there besides *.slack.com
    read_timeout_s: float


class _TooBig(Exception):
    pass


async def download_shared_file(
    session: aiohttp.ClientSession, file: dict[str, Any], *, token: str, inbox: Inbox, ts: str
) -> Attachment:
    """Save one file of a `file_share` message; never raises (a failure is `Attachment.error`)."""
    name = _safe_name(str(file.get("name") or file.get("id") or "file"))
    mime = str(file.get("mimetype") or "") or None
    size = file.get("size") if isinstance(file.get("size"), int) else None
    kind = _kind(mime)
    cap = inbox.max_mb * _MB

    def failed(reason: str) -> Attachment:
        return Attachment(kind, None, name, mime, size, error=reason)

    if size is not None and size > cap:
        return failed(
            f"not downloaded: the file is {size / _MB:.1f} MB and the limit is {inbox.max_mb} MB "
            "([slack] max_download_mb)"
        )
    url = str(file.get("url_private_download") or file.get("url_private") or "")
    if not url:
        return failed("Slack sent no download link for this file (it may be external or deleted)")
    if not _is_slack_host(url, inbox.api_host):
        return failed("not downloaded: the file link is not on Slack")
    try:
        day = datetime.fromtimestamp(float(ts)).strftime("%Y-%m-%d")
    except (ValueError, OverflowError, OSError):
        day = datetime.now().strftime("%Y-%m-%d")
    stored = f"{_safe_name(str(file.get('id') or ts))}-{name}"
    target = inbox.dir / day / stored
    # A big file may take longer than one API call: bound the silence, not the whole transfer.
    timeout = aiohttp.ClientTimeout(total=None, sock_read=inbox.read_timeout_s)
    written = 0
    try:
        headers = {"Authorization": f"Bearer {token}"}
        async with session.get(url, headers=headers, timeout=timeout) as resp:
            if resp.status != 200:
                return failed(f"Slack answered HTTP {resp.status} for the file")
            if resp.content_type == "text/html" and mime != "text/html":
                return failed(
                    "Slack sent its sign-in page instead of the file: give the app the "
                    "files:read scope and reinstall it"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                async for chunk in resp.content.iter_chunked(65536):
                    written += len(chunk)
                    if written > cap:
                        raise _TooBig
                    out.write(chunk)
    except _TooBig:
        target.unlink(missing_ok=True)
        return failed(f"not downloaded: larger than {inbox.max_mb} MB")
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        target.unlink(missing_ok=True)
        return failed(f"download failed ({type(e).__name__})")
    return Attachment(kind, f"{inbox.rel}/{day}/{stored}", name, mime, written)


def _is_slack_host(url: str, api_host: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == api_host.lower() or host == "slack.com" or host.endswith(".slack.com")


def _kind(mime: str | None) -> AttachmentKind:
    kinds: dict[str, AttachmentKind] = {"image": "photo", "audio": "audio", "video": "video"}
    return kinds.get((mime or "").split("/", 1)[0], "document")


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "file"
    return cleaned[:100]
