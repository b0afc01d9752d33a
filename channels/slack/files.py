"""Files shared in Slack: downloaded with the bot token and handed to the inbox.

    attachment = await download_shared_file(session, file, token=..., limits=limits,
                                            inbox=inbox, ts=ts)

Slack's `url_private` links need `Authorization: Bearer <bot token>` (scope `files:read`);
without it Slack answers with its HTML sign-in page, which is reported, not saved. The token is
only ever sent to Slack's own hosts (or the configured API host, for tests).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from channels.base import InboxWriter
from common.attachment import Attachment, AttachmentKind

_MB = 1024 * 1024


@dataclass(frozen=True)
class DownloadLimits:
    """How big a file may be, where the token may go, how long a download may stall."""

    max_mb: int
    api_host: str  # the Web API's host; the token may go there besides *.slack.com
    read_timeout_s: float


class _TooBig(Exception):
    pass


async def download_shared_file(
    session: aiohttp.ClientSession,
    file: dict[str, Any],
    *,
    token: str,
    limits: DownloadLimits,
    inbox: InboxWriter,
    ts: str,
) -> Attachment:
    """Save one file of a `file_share` message as `<file id>-<name>` in the inbox (dated by the
    message's `ts`); never raises (a failure is `Attachment.error`)."""
    name = str(file.get("name") or file.get("id") or "file")
    mime = str(file.get("mimetype") or "") or None
    size = file.get("size") if isinstance(file.get("size"), int) else None
    kind = _kind(mime)
    cap = limits.max_mb * _MB

    def failed(reason: str) -> Attachment:
        return Attachment(kind, None, name, mime, size, error=reason)

    if size is not None and size > cap:
        return failed(
            f"not downloaded: the file is {size / _MB:.1f} MB and the limit is {limits.max_mb} MB "
            "([slack] max_download_mb)"
        )
    url = str(file.get("url_private_download") or file.get("url_private") or "")
    if not url:
        return failed("Slack sent no download link for this file (it may be external or deleted)")
    if not _is_slack_host(url, limits.api_host):
        return failed("not downloaded: the file link is not on Slack")
    try:
        received_at = datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError):
        received_at = datetime.now(UTC)
    # A big file may take longer than one API call: bound the silence, not the whole transfer.
    timeout = aiohttp.ClientTimeout(total=None, sock_read=limits.read_timeout_s)
    data = bytearray()
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
            async for chunk in resp.content.iter_chunked(65536):
                data += chunk
                if len(data) > cap:
                    raise _TooBig
        stored = f"{file.get('id') or ts}-{name}"
        rel = await asyncio.to_thread(inbox.save, stored, bytes(data), received_at)
    except _TooBig:
        return failed(f"not downloaded: larger than {limits.max_mb} MB")
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return failed(f"download failed ({type(e).__name__})")
    return Attachment(kind, rel, name, mime, len(data))


def _is_slack_host(url: str, api_host: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == api_host.lower() or host == "slack.com" or host.endswith(".slack.com")


def _kind(mime: str | None) -> AttachmentKind:
    kinds: dict[str, AttachmentKind] = {"image": "photo", "audio": "audio", "video": "video"}
    return kinds.get((mime or "").split("/", 1)[0], "document")
