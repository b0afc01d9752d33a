"""What a turn writes to its session's transcript, and reads back of it: the `user` event of a
message (with who sent it and what came with it), the model's answer and tool calls, the tool
results. Blocking (SQLite): call from a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.history import usage_record
from agent.media.reader import stored_attachment
from agent.policy import taints
from agent.requests import AgentRequest
from agent.types import ModelResponse, ToolResult
from memory.store.sessions import SessionStore


def user_content(
    request: AgentRequest, text: str, attachments: Sequence[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The stored `user` event of a message: its text and, when it is not the owner's, who sent
    it (no `sender` means the owner, as in transcripts from before senders were recorded).
    `attachments` is their stored form when the media reader made it (paths and what was read
    of them, never image bytes), else each attachment's path, kind and name."""
    content: dict[str, Any] = {"text": text}
    if request.sender != "owner":
        sender = {
            "kind": request.sender,
            "id": request.sender_id,
            "name": request.sender_name,
            "channel": request.key.channel,
        }
        content["sender"] = {k: v for k, v in sender.items() if v is not None}
    if attachments:
        content["attachments"] = [dict(a) for a in attachments]
    elif request.attachments:
        content["attachments"] = [stored_attachment(a) for a in request.attachments]
    if request.message_ids:
        content["message_ids"] = list(request.message_ids)
    return content


def same_turn(content: dict[str, Any], request: AgentRequest) -> bool:
    """Whether stored `user` event `content` is `request`'s message (by its platform ids)."""
    if request.message_ids:
        return content.get("message_ids") == list(request.message_ids)
    return content.get("text") == request.text


def store_response(store: SessionStore, session_id: str, response: ModelResponse) -> None:
    """The model's answer (marked incomplete when it was cut off), then each tool call."""
    usage = usage_record(response.usage, response.model)
    content: dict[str, object] = {"text": response.text}
    if response.cut_off:
        content["incomplete"] = True
    store.append(session_id, "assistant", content, usage)
    for call in response.tool_calls:
        content = {"id": call.id, "name": call.name, "input": dict(call.input)}
        store.append(session_id, "tool_call", content)


def store_results(store: SessionStore, session_id: str, results: Sequence[ToolResult]) -> None:
    for r in results:
        content: dict[str, Any] = {
            "tool_use_id": r.tool_use_id,
            "content": r.content,
            "is_error": r.is_error,
        }
        if r.image:  # the reference, never the picture
            content["image"] = dict(r.image)
        store.append(session_id, "tool_result", content)


def read_outside_content(store: SessionStore, session_id: str) -> bool:
    """Whether the session ever called a tool that reads outside text (a web page)."""
    calls = store.events(session_id, kinds=("tool_call",))
    return any(taints(str(e.content.get("name"))) for e in calls)
