"""In Events mode a body that is not UTF-8 got HTTP
500 and a traceback, because it was decoded before its signature was checked."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time

import aiohttp
import pytest

from tests.test_slack import SIGNING_SECRET, callback, events_mode, run, signed


def signed_bytes(body: bytes, secret: str = SIGNING_SECRET) -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
    }


@run
async def test_a_signed_body_that_is_not_utf8_gets_400_and_one_log_line(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = b'{"type": "event_callback", "event": {"text": "\xff\xfe"}}'
    with caplog.at_level(logging.INFO):
        async with events_mode(tmp_path) as (slack, url, inbox), aiohttp.ClientSession() as http:
            async with http.post(url, data=bad, headers=signed_bytes(bad)) as resp:
                assert resp.status == 400
            async with http.post(url, data=bad, headers=signed_bytes(bad, "wrong")) as resp:
                assert resp.status == 401
            body = callback(slack.dm("still listening"))
            async with http.post(url, data=body, headers=signed(body)) as resp:
                assert resp.status == 200
            [got] = await inbox.wait()
    assert got.text == "still listening"
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in problems] == [
        "Slack: refused a signed event whose body is not UTF-8 (HTTP 400)"
    ]
    assert all(r.exc_info is None for r in caplog.records)


@run
async def test_a_timestamp_of_digits_int_refuses_is_401_not_a_server_error(tmp_path) -> None:
    body = b'{"type": "event_callback", "event": {"type": "message", "text": "hi"}}'
    async with events_mode(tmp_path) as (slack, url, inbox), aiohttp.ClientSession() as http:
        for stamp in ("²", "١٧٠٠٠٠٠٠٠٠"):  # digits to str.isdigit; int() refuses the first
            headers = {**signed_bytes(body), "X-Slack-Request-Timestamp": stamp}
            async with http.post(url, data=body, headers=headers) as resp:
                assert resp.status == 401
        good = callback(slack.dm("still listening"))
        async with http.post(url, data=good, headers=signed(good)) as resp:
            assert resp.status == 200
        [got] = await inbox.wait()
    assert got.text == "still listening"
