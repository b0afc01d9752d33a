"""The text of a received document: PDF (pypdf), DOCX (python-docx) and text-like files (txt,
md, csv, json, source code, …), cut to a budget with a note of what was left out.

    doc = read_document(path, "Q3 report.pdf", max_chars=20_000)        # DocumentError if not
    doc = read_document(path, "Q3 report.pdf", max_chars=20_000, first=8, last=14)  # pages 8-14

A PDF is read page by page and only as far as the budget goes (its page tree walked lazily),
so a 1,000-page file costs the pages that fit, not the whole book. A PDF without a text layer
(a scan) and an encrypted one are said so; a "text" file with binary content (NUL bytes, mostly
control characters) is refused whatever its name. Units: PDFs count pages, everything else lines.
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_TEXT_SUFFIXES_LIST = (
    ".txt .md .markdown .csv .tsv .json .jsonl .yaml .yml .toml .ini .cfg .conf .log .xml .html "
    ".htm .rst .tex .py .js .ts .tsx .jsx .java .c .h .cpp .hpp .cs .go .rs .rb .php .sh .bash "
    ".sql .swift .kt .scala .lua .r .pl .css .scss .vue .ics .vcf .srt .env .gitignore"
)
TEXT_SUFFIXES = frozenset(_TEXT_SUFFIXES_LIST.split(" "))
_TEXT_MIME = ("text/", "application/json", "application/xml", "application/x-yaml")
_DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_SNIFF_BYTES = 8192
NO_TEXT_LAYER = (
    "has no text layer (a scan or photos of pages?): I can't read it as text; send the pages as "
    "photos, or a PDF with text"
)


class DocumentError(Exception):
    """The document cannot be read; the message says why in one line."""


@dataclass(frozen=True)
class DocumentText:
    text: str
    unit: str  # "page" or "line"
    first: int  # the first unit included
    last: int  # the last unit included (0: none)
    total: int  # units in the document
    note: str | None = None  # what was left out, or why there is no text

    @property
    def complete(self) -> bool:
        return self.first <= 1 and self.last >= self.total


def document_kind(name: str | None, mime: str | None) -> str | None:
    """ "pdf", "docx", "text", or None for a file this module does not read."""
    suffix = Path(name or "").suffix.lower()
    mime = (mime or "").lower()
    if suffix == ".pdf" or mime == "application/pdf":
        return "pdf"
    if suffix == ".docx" or mime == _DOCX_MIME:
        return "docx"
    if suffix in TEXT_SUFFIXES or mime.startswith(_TEXT_MIME):
        return "text"
    return None


def read_document(
    path: Path | bytes,
    name: str,
    *,
    max_chars: int,
    mime: str | None = None,
    first: int = 1,
    last: int | None = None,
) -> DocumentText:
    """The text of units `first`..`last` (pages of a PDF, lines otherwise) of the file at `path`
    (or its bytes), cut at `max_chars` with a note saying what was left out. Blocks;
    DocumentError if it cannot be read."""
    kind = document_kind(name, mime) or "text"
    first = max(1, first)
    if kind == "pdf":
        return _read_pdf(path, name, max_chars, first, last)
    lines = _docx_lines(path, name) if kind == "docx" else _text_lines(path, name)
    return _cut_lines(lines, name, max_chars, first, last)


# -- PDF -----------------------------------------------------------------------------------------


def _read_pdf(
    path: Path | bytes, name: str, max_chars: int, first: int, last: int | None
) -> DocumentText:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(path) if isinstance(path, bytes) else path)
        if reader.is_encrypted and not _opens_without_password(reader):
            raise DocumentError(f"{name} is encrypted (password-protected): ask for a copy without")
        root: Any = reader.trailer["/Root"]
        root_pages = root["/Pages"].get_object()
        total = int(root_pages.get("/Count", 0))
    except DocumentError:
        raise
    except (PdfReadError, FileNotDecryptedError, ValueError, KeyError, TypeError, OSError) as exc:
        raise DocumentError(f"{name} is not a readable PDF ({_reason(exc)})") from None
    if total == 0:
        return DocumentText("", "page", 1, 0, 0, f"{name} has no pages")
    if first > total:
        return DocumentText("", "page", first, 0, total, f"{name} has {total} pages")
    end = min(total, last or total)
    parts: list[str] = []
    used = 0
    page_no = first - 1
    cut_inside = False
    pages = _lazy_pages(reader, root_pages, first)
    for page_no in range(first, end + 1):
        try:
            page = next(pages, None)
            if page is None:
                page_no -= 1
                break
            text = (page.extract_text() or "").strip()
        except Exception as exc:  # one bad page must not lose the rest
            log.debug("page %d of %s unreadable", page_no, name, exc_info=True)
            text = f"[page {page_no} could not be read: {_reason(exc)}]"
        block = f"--- page {page_no} ---\n{text}\n"
        if used + len(block) > max_chars and parts:
            page_no -= 1
            break
        if used + len(block) > max_chars:  # a single page over the budget: its beginning
            block = block[: max_chars - used]
            cut_inside = True
        parts.append(block)
        used += len(block)
        if cut_inside:
            break
    got = "".join(parts)
    body = "\n".join(line for line in got.splitlines() if not line.startswith("--- page "))
    if not body.strip():
        return DocumentText("", "page", first, page_no, total, f"{name} {NO_TEXT_LAYER}")
    note = _left_out("page", first, page_no, total, cut_inside)
    return DocumentText(got.rstrip(), "page", first, page_no, total, note)


_INHERITED = ("/Resources", "/MediaBox", "/CropBox", "/Rotate")


def _lazy_pages(reader: Any, node: Any, first: int, inherited: dict | None = None) -> Iterator[Any]:
    """The pages from number `first` on, walking the page tree as far as they are needed:
    pypdf's `reader.pages` parses every page object of the file before the first one is read,
    seconds for a book. Subtrees wholly before `first` are skipped by their /Count."""
    from pypdf import PageObject
    from pypdf.generic import NameObject

    inherited = dict(inherited or {})
    inherited.update({k: node[k] for k in _INHERITED if k in node})
    skip = first - 1
    for ref in node.get("/Kids", []):
        kid = ref.get_object()
        if kid.get("/Type") == "/Pages" or "/Kids" in kid:
            count = int(kid.get("/Count", 0))
            if skip >= count:
                skip -= count
                continue
            yield from _lazy_pages(reader, kid, skip + 1, inherited)
            skip = 0
            continue
        if skip:
            skip -= 1
            continue
        page = PageObject(reader, getattr(ref, "indirect_reference", None) or ref)
        page.update(kid)
        for key, value in inherited.items():
            if key not in page:
                page[NameObject(key)] = value
        yield page


def _opens_without_password(reader: object) -> bool:
    """Many PDFs are "encrypted" with an empty user password (only printing is restricted)."""
    try:
        return bool(reader.decrypt(""))  # type: ignore[attr-defined]
    except Exception:
        return False


# -- DOCX and text ---------------------------------------------------------------------------------


def _docx_lines(path: Path | bytes, name: str) -> list[str]:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(io.BytesIO(path) if isinstance(path, bytes) else str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise DocumentError(f"{name} is not a readable Word document ({_reason(exc)})") from None
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            lines.append(" | ".join(cell.text.strip() for cell in row.cells))
    return lines


def _text_lines(path: Path | bytes, name: str) -> list[str]:
    data = path if isinstance(path, bytes) else path.read_bytes()
    if looks_binary(data[:_SNIFF_BYTES]):
        raise DocumentError(f"{name} holds binary data, not text (whatever its name says)")
    return data.decode("utf-8", errors="replace").splitlines()


def looks_binary(head: bytes) -> bool:
    """NUL bytes, or more than 10 % control characters other than tab, CR, LF, FF and ESC."""
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return controls / len(head) > 0.10


def _cut_lines(
    lines: list[str], name: str, max_chars: int, first: int, last: int | None
) -> DocumentText:
    total = len(lines)
    end = min(total, last or total)
    kept: list[str] = []
    used = 0
    line_no = first - 1
    cut_inside = False
    for line_no in range(first, end + 1):
        line = lines[line_no - 1]
        if used + len(line) + 1 > max_chars:
            if not kept:  # one enormous line: its beginning
                kept.append(line[:max_chars])
                cut_inside = True
            else:
                line_no -= 1
            break
        kept.append(line)
        used += len(line) + 1
    if first > total:
        return DocumentText("", "line", first, 0, total, f"{name} has {total} lines")
    note = _left_out("line", first, line_no, total, cut_inside)
    return DocumentText("\n".join(kept), "line", first, line_no, total, note)


def _left_out(unit: str, first: int, last: int, total: int, cut_inside: bool) -> str | None:
    if first <= 1 and last >= total and not cut_inside:
        return None
    shown = f"{unit}s {first}-{last}" if last > first else f"{unit} {last}"
    if cut_inside:
        shown += " (cut inside)"
    gone = []
    if first > 1:
        gone.append(f"{unit}s 1-{first - 1}" if first > 2 else f"{unit} 1")
    if cut_inside:
        gone.append(f"the rest of {unit} {last}")
    if last < total:
        gone.append(f"{unit}s {last + 1}-{total}" if last + 1 < total else f"{unit} {total}")
    return f"showed {shown} of {total}; left out: {', '.join(gone)}"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:120]
