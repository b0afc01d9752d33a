"""`read_file` on a document: the pages (PDF) or lines (DOCX, text) the model asks for, read
from the workspace without following links, as untrusted content."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.media.documents import DocumentError, read_document
from agent.media.render import DOCUMENT_WARNING
from agent.tools import ToolFailure
from memory.errors import WorkspaceError
from memory.files.workspace import read_confined

READ_CHARS = 15_000  # under the tool result cap, with room for the wrapper
_RANGE = re.compile(r"^\s*(\d+)\s*(?:[-–]\s*(\d+)\s*)?$")


def read_document_part(
    workspace: Path, path: str, args: Mapping[str, Any], *, allow_hard_links: bool
) -> str:
    """Pages `pages` ("8-14", "3") of a PDF, or lines `from`/`lines` of another document. Blocks;
    ToolFailure with advice when it cannot."""
    first, last = 1, None
    if args.get("pages"):
        match = _RANGE.match(str(args["pages"]))
        if not match:
            raise ToolFailure('pages must be a page or a range, e.g. "8" or "8-14".')
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if last < first:
            raise ToolFailure(f"pages {args['pages']}: the range ends before it starts.")
    elif args.get("from"):
        first = int(args["from"])
        if args.get("lines"):
            last = first + int(args["lines"]) - 1
    try:
        data = read_confined(workspace, path, allow_hard_links=allow_hard_links)
        doc = read_document(data, Path(path).name, max_chars=READ_CHARS, first=first, last=last)
    except (WorkspaceError, DocumentError) as exc:
        raise ToolFailure(str(exc)) from None
    if not doc.text:
        return f"{path}: {doc.note or 'nothing there'}."
    body = doc.text.replace("</untrusted", "&lt;/untrusted")
    head = f"{path}, {doc.unit}s {doc.first}-{doc.last} of {doc.total}"
    note = f"\n[{doc.note}]" if doc.note else ""
    return f'{DOCUMENT_WARNING}\n<untrusted source="{head}">\n{body}\n</untrusted>{note}'
