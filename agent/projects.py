"""Projects: which project a session is in, and the `/project` command.

    projects = ProjectDirectory.of({"apollo": (["-1001234"], [Path("~/code/apollo")])})
    projects.active(session)          # the session's project: chosen with /project, else its
                                      # chat's from `[projects.NAME] chats`, else None

A session's choice is stored with it (`Session.project`, memory/store/sessions.py), so it lasts
as long as the session, across restarts; `/new` starts the next one in its chat's default
again. The active project reaches memory_search (its tagged hits are boosted), Active Memory (a
trigger entry tagged with another project is not injected), standing intents (one created in a
project fires only there) and what the agent writes (tagged `<!-- project: NAME -->`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.policy import policy_for
from memory.project_tags import normalise_project, project_name_error
from memory.store.sessions import Session, SessionKey, SessionStore

NONE_WORDS = ("none", "off", "-")  # `/project none` clears the session's project


@dataclass(frozen=True)
class ProjectDirectory:
    """The projects of the configuration: their names, the chats that start in each (Telegram
    chat or `chat:topic` ids, Slack channel ids) and the folders `pinch chat` starts in each."""

    names: tuple[str, ...] = ()
    chats: Mapping[str, str] = field(default_factory=dict)  # chat id → project
    folders: tuple[tuple[Path, str], ...] = ()  # (resolved folder, project)

    @classmethod
    def of(cls, table: Mapping[str, tuple[Sequence[str], Sequence[Path]]]) -> ProjectDirectory:
        """From `[projects.NAME]` settings: name → (chats, folders). Names are normalised."""
        chats: dict[str, str] = {}
        folders: list[tuple[Path, str]] = []
        names: list[str] = []
        for raw, (chat_ids, dirs) in table.items():
            name = normalise_project(raw)
            if name is None:
                raise ValueError(project_name_error(raw))
            names.append(name)
            chats.update((str(c).strip(), name) for c in chat_ids)
            folders += [(Path(d).expanduser().resolve(), name) for d in dirs]
        return cls(tuple(names), chats, tuple(folders))

    def chat_default(self, key: SessionKey) -> str | None:
        """The project `key`'s chat starts in: its topic's (`chat:topic`) before its chat's."""
        if key.thread_id is not None:
            topic = self.chats.get(f"{key.peer_id}:{key.thread_id}")
            if topic is not None:
                return topic
        return self.chats.get(key.peer_id)

    def folder_default(self, cwd: Path, known: Iterable[str] = ()) -> str | None:
        """The project of `cwd`: a configured folder it is in (the deepest), or else the git
        repository it is in, when the repository's root folder is named like a project (one
        configured, or one of `known`: those tagged in memory)."""
        here = cwd.expanduser().resolve()
        inside = [(len(f.parts), name) for f, name in self.folders if here.is_relative_to(f)]
        if inside:
            return max(inside)[1]
        for folder in (here, *here.parents):
            if (folder / ".git").exists():
                name = normalise_project(folder.name)
                return name if name in {*self.names, *known} else None
        return None

    def active(self, session: Session) -> str | None:
        """The session's project: the one chosen (None when cleared), else its chat's."""
        if session.project is not None:
            return session.project or None
        return self.chat_default(session.key)


def start_in_project(store: SessionStore, key: SessionKey, project: str) -> Session:
    """Put `key`'s current session in `project` (`pinch chat` started in a project's folder).
    Blocks."""
    session = store.current(key)
    return session if session.project == project else store.set_project(session.id, project)


async def project_command(
    store: SessionStore,
    projects: ProjectDirectory,
    key: SessionKey,
    argument: str,
    found: Callable[[], Mapping[str, int]],
) -> str:
    """`/project` (show), `/project NAME` (set), `/project none` (clear) for `key`'s session.
    `found` counts the tagged entries of each project in memory (blocks; run in a thread)."""
    session = await asyncio.to_thread(store.current, key)
    word = argument.strip()
    if not word:
        if not policy_for(key).owner_private:  # the owner's projects are not for a group
            return f"Project: {projects.active(session) or 'none'}."
        counts = await asyncio.to_thread(found)
        return describe_projects(projects.active(session), projects.names, counts)
    if word.lower() in NONE_WORDS:
        await asyncio.to_thread(store.set_project, session.id, "")
        return "No project for this session now: memory search prefers none."
    name = normalise_project(word)
    if name is None or " " in word:
        return project_name_error(word)
    await asyncio.to_thread(store.set_project, session.id, name)
    return (
        f"Project for this session: {name}. Its notes come first in memory search, its trigger "
        "entries and intents are on, and what I write to memory is tagged with it."
    )


def describe_projects(active: str | None, names: Iterable[str], counts: Mapping[str, int]) -> str:
    """What `/project` shows: the active project and the known ones (configured or tagged)."""
    known = sorted(set(names) | set(counts))
    head = f"Project: {active}" if active else "Project: none"
    if not known:
        return (
            f"{head}. No projects known yet: tag notes with <!-- project: NAME --> or "
            "add [projects.NAME] to config.toml; /project NAME sets one."
        )
    listed = ", ".join(f"{n} ({entries(counts.get(n, 0))})" for n in known)
    return f"{head}. Known projects: {listed}. /project NAME sets one, /project none clears it."


def entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"
