"""Who may see and do what: the one place Pinch decides privacy and trust.

The rule: ONLY the owner's direct sessions are private. A session key is the owner's when it is a
direct chat with peer "owner" (`SessionKey.is_owner_direct`; the gateway maps every identity in
`[owners]`, and the terminal user, to that peer). Every other session — a group, a channel, a
thread in them, another person's direct chat — is *shared*: it sees its own conversation only
and writes nothing into the owner's files.

- The owner's direct chat, owner's message: MEMORY.md, USER.md, extra paths, daily logs and
  session notes loaded and readable; recall over them and the owner's direct chats; every tool
  (remember, memory_append), the memory flush and session notes on /new.
- The owner's direct chat, automation or system message: the same, except `remember` (the
  curated files change only on the owner's own word).
- Any other session, anyone's message: no owner file, loaded or readable; recall over this
  conversation's transcript only; no writes at all (no memory_append, flush or session note).

Shared sessions may read the workspace's public bootstrap files (AGENTS.md, SOUL.md, …) and
the attachments sent in their own conversation; their durable memory is their own transcript,
which stays searchable in their own scope after compaction or /new.

Trust: tools for which `taints` is true bring outside content (web_fetch, mcp_call and every MCP
tool, named SERVER__tool); after one runs, the rest of
the turn is *tainted* and whatever the agent appends is stored as `untrusted` (`append_origin`).
web_fetch is not in SHARED_TOOLS, so only the owner's direct chats are offered it.

Tools opened per server (MCP, agent/mcp): the owner's direct chats always; a paired person's
direct chat when the server is `shared`; a group or channel only when it is listed in the
server's `groups` (`offers_opened_tool`).

`policy_for(key, sender)` is asked by the context builder (what is loaded, which tools are
offered), the tools (what is read, searched, written), the turn loop (memory flush) and /new
(session notes).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from agent.requests import SenderKind
from common.channel_table import channel_names
from memory.search.filters import SearchFilter
from memory.store.lineage import OUTSIDE_CONTENT_TOOLS, is_outside_content_tool
from memory.store.sessions import SessionKey

# Loaded into every session's prompt, so readable everywhere.
SHARED_FILES = frozenset({"AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "HEARTBEAT.md"})
OWNER_FILES = frozenset({"MEMORY.md", "USER.md"})
# Channels whose owner direct chats are the owner's "other conversations" when
# `owner_dm_scope = "per-channel"` keeps one session per channel: every channel of the table.
OWNER_CHANNELS = channel_names()

# Shared sessions get only these (an allowlist: a tool added later is the owner's until it is
# listed here). The owner's direct chats get every tool.
SHARED_TOOLS = frozenset({"memory_search", "transcript_read", "read_file", "current_time"})
# Tools that change the owner's curated files or act for the owner run only on the owner's own
# message, never in an automated turn ("schedule" and "intent" arrive with automations).
OWNER_WORD_TOOLS = frozenset({"remember", "schedule", "intent"})
# Tools whose results are outside content: they taint the rest of the turn.
TAINTING_TOOLS = OUTSIDE_CONTENT_TOOLS


def taints(tool: str) -> bool:
    """Whether a call of `tool` taints the rest of its turn (its result is outside content)."""
    return is_outside_content_tool(tool)


def append_origin(sender: SenderKind, tainted: bool) -> str:
    """The origin of what the agent appends in a turn: untrusted once the turn read outside
    content; 'agent' on the owner's word; 'system' in automated turns."""
    if tainted:
        return "untrusted"
    return "agent" if sender == "owner" else "system"


@dataclass(frozen=True)
class SessionPolicy:
    """What one turn may see and do."""

    owner_private: bool  # owner files loaded and readable, owner recall, writes to memory
    sender: SenderKind
    search: SearchFilter  # what memory_search (and recall) may return
    transcript_scopes: tuple[str, ...]  # conversations whose transcripts may be read

    @property
    def writes_memory(self) -> bool:
        """The memory flush, session notes and memory_append may write the owner's files."""
        return self.owner_private

    def offers(self, tool: str) -> bool:
        """Whether the model is shown `tool` (per session, so the prompt cache holds)."""
        return self.owner_private or tool in SHARED_TOOLS

    def allows(self, tool: str) -> bool:
        """Whether `tool` may run in this turn (narrower than `offers` for automations)."""
        return self.offers(tool) and (self.sender == "owner" or tool not in OWNER_WORD_TOOLS)

    def may_read_file(self, rel_path: str, attachments: frozenset[str] = frozenset()) -> bool:
        """Whether read_file may open workspace file `rel_path` ('/'-separated, confined).

        `attachments` are the files sent in this conversation."""
        return self.owner_private or rel_path in SHARED_FILES or rel_path in attachments


def offers_opened_tool(
    policy: SessionPolicy, key: SessionKey, *, shared: bool, groups: Collection[str]
) -> bool:
    """Whether `key`'s conversation under `policy` is offered a tool its owner opened with
    `shared` (paired people's direct chats) and `groups` ("channel:chat_id" of each group or
    channel it is opened to). Owner-only by default."""
    if policy.owner_private:
        return True
    if key.is_group:
        return f"{key.channel}:{key.peer_id}" in groups
    return shared


def policy_for(key: SessionKey, sender: SenderKind = "owner") -> SessionPolicy:
    """The policy of a turn in `key`'s conversation for a message from `sender`."""
    if key.is_owner_direct and sender != "person":
        owner_scopes = tuple(
            dict.fromkeys(
                [
                    key.memory_scope,
                    *(str(SessionKey.owner_direct(ch, key.agent_id)) for ch in OWNER_CHANNELS),
                ]
            )
        )
        return SessionPolicy(
            owner_private=True,
            sender=sender,
            search=SearchFilter(("", *owner_scopes)),
            transcript_scopes=owner_scopes,
        )
    own = (key.memory_scope,)
    return SessionPolicy(
        owner_private=False,
        sender=sender,
        search=SearchFilter(own, sources=frozenset({"sessions"})),
        transcript_scopes=own,
    )
