"""Errors a user can meet in the memory subsystem; each message says what to do."""


class MemoryError_(Exception):  # trailing _: not the builtin MemoryError
    """Base class for memory errors whose message is advice for the user."""


class DatabaseError(MemoryError_):
    """The agent database cannot be opened or used."""


class WorkspaceError(MemoryError_):
    """The workspace is missing or a path is not allowed."""


class IndexingError(MemoryError_):
    """Indexing could not complete."""


class SessionError(MemoryError_):
    """A session or transcript does not exist or cannot be used."""


class NewerSchemaError(DatabaseError):
    """The database was migrated by a newer Pinch than this one: refused, nothing is changed."""


class DatabaseCorruptError(DatabaseError):
    """The agent database file is damaged; the message says what to do and what is lost."""


# The search side's name for the same failure: one class, so one handler catches both.
IndexCorruptError = DatabaseCorruptError
