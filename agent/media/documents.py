"""The text of a received document: PDF (pypdf), DOCX (python-docx) and text-like files (txt,
md, csv, json, source code, …), cut to a budget with a note of what was left out.

    doc = read_document(path, "Q3 report.pdf", max_chars=20_000)        # DocumentError if not
    doc = read_document(path, "Q3 report.pdf", max_chars=20_000, first=8, last=14)  # pages 8-14

A PDF is read page by page and only as far as the budget goes (its page tree walked lazily),
so a 1,000-page file costs the pages that fit, not the whole book. A PDF without a text layer
(a scan) and an encrypted one are said so; a "text" file with binary content (NUL bytes, mostly
control characters) is refused whatever its name; UTF-16/32 text is recognised by its BOM (or
UTF-16's NUL pattern), and a text file is walked, never split into a list of all its lines. A
DOCX whose parts unpack past DOCX_MAX_MARKUP / DOCX_MAX_UNPACKED is refused before python-docx
parses it, and any parser failure is a DocumentError. Units: PDFs count pages, else lines.
"""

from __future__ import annotations

import codecs
import io
import logging
import time
import zipfile
from collections.abc import Callable, Iterator
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
MB = 1024 * 1024
_SKIP_BLOCK = MB
# What python-docx may unpack: ~5,000 pages of text is ~30 MB of XML (a tree ~4x that in memory).
DOCX_MAX_MARKUP = 32 * MB
DOCX_MAX_UNPACKED = 128 * MB
# A few kilobytes of PDF can decompress to megabytes of drawing operators that pypdf walks for
# seconds each (10 MB: 12 s, 330 MB): pages above this are named, not read, and reading stops
# at the first page boundary past PDF_READ_SECONDS.
PDF_PAGE_CONTENT_MAX = 1 * MB
PDF_READ_SECONDS = 10.0
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
    if kind == "docx":
        lines = _docx_lines(path, name)
        return _cut_lines(len(lines), lambda n: iter(lines[n - 1 :]), name, max_chars, first, last)
    return _cut_lines(*_text_lines(path, name), name, max_chars, first, last)


# -- PDF -----------------------------------------------------------------------------------------


def _read_pdf(
    path: Path | bytes, name: str, max_chars: int, first: int, last: int | None
) -> DocumentText:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(path) if isinstance(path, bytes) else path)
        if reader.is_encrypted and not _opens_without_password(reader):
            raise DocumentError(f"{name} is encrypted (password-protected): ask for a copy without")
        root: Any = reader.trailer["/Root"]
        root_pages = root["/Pages"].get_object()
        total = int(root_pages.get("/Count", 0))
    except DocumentError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # hostile bytes make a parser raise anything, not only its own errors
        log.debug("%s is not a readable PDF", name, exc_info=True)
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
    deadline = time.monotonic() + PDF_READ_SECONDS
    for page_no in range(first, end + 1):
        try:
            page = next(pages, None)
            if page is None:
                page_no -= 1
                break
            drawn = _content_bytes(page)
            if drawn > PDF_PAGE_CONTENT_MAX:
                text = (
                    f"[page {page_no} not read: its drawing instructions are {drawn / MB:.0f} MB, "
                    f"more than Pinch reads as text ({PDF_PAGE_CONTENT_MAX // MB} MB)]"
                )
            else:
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
        if cut_inside or time.monotonic() > deadline:  # the rest: another read_file
            break
    got = "".join(parts)
    body = "\n".join(line for line in got.splitlines() if not line.startswith("--- page "))
    if not body.strip():
        return DocumentText("", "page", first, page_no, total, f"{name} {NO_TEXT_LAYER}")
    note = _left_out("page", first, page_no, total, cut_inside)
    return DocumentText(got.rstrip(), "page", first, page_no, total, note)


def _content_bytes(page: Any) -> int:
    """The size of a page's decoded drawing instructions (pypdf caps the decoding itself)."""
    contents = page.get_contents()
    return len(contents.get_data()) if contents is not None else 0


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

    source = io.BytesIO(path) if isinstance(path, bytes) else path
    try:
        _check_unpacked_size(source, name)
        if isinstance(source, io.BytesIO):
            source.seek(0)
        document = docx.Document(source if isinstance(source, io.BytesIO) else str(source))
        lines = [p.text for p in document.paragraphs]
        for table in document.tables:
            for row in table.rows:
                lines.append(" | ".join(cell.text.strip() for cell in row.cells))
    except DocumentError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # a damaged package: zip, XML or python-docx's own errors
        log.debug("%s is not a readable Word document", name, exc_info=True)
        reason = "not a Word file" if type(exc).__name__ == "PackageNotFoundError" else _reason(exc)
        raise DocumentError(f"{name} is not a readable Word document ({reason})") from None
    return lines


def _check_unpacked_size(source: Path | io.BytesIO, name: str) -> None:
    """Refuse a DOCX whose parts unpack to more than python-docx should hold in memory (it
    reads every part whole, and parses the XML into a tree several times its size): a few
    hundred kilobytes of "zip bomb" can unpack to gigabytes. The sizes are the archive's own
    declarations, which zipfile enforces while it reads (a part longer than declared fails)."""
    with zipfile.ZipFile(source) as archive:
        parts = archive.infolist()
    markup = sum(p.file_size for p in parts if p.filename.endswith((".xml", ".rels")))
    total = sum(p.file_size for p in parts)
    if markup > DOCX_MAX_MARKUP or total > DOCX_MAX_UNPACKED:
        raise DocumentError(
            f"{name} unpacks to {max(markup, total) / MB:.0f} MB, more than Pinch reads from a "
            f"Word document ({DOCX_MAX_MARKUP // MB} MB of text markup, {DOCX_MAX_UNPACKED // MB} "
            "MB in all): send it as a PDF, or in parts"
        )


def _text_lines(path: Path | bytes, name: str) -> tuple[int, Callable[[int], Iterator[str]]]:
    """The line count of a text file and a way to walk its lines from any line on, without a
    list of them all (a 20 MB file of short lines is millions of strings)."""
    data = path if isinstance(path, bytes) else path.read_bytes()
    encoding, bom = _text_encoding(data[:_SNIFF_BYTES])
    text = data[bom:].decode(encoding, errors="replace")
    del data
    if looks_binary(text[:_SNIFF_BYTES]):
        raise DocumentError(f"{name} holds binary data, not text (whatever its name says)")
    newline = "\n" if "\n" in text or "\r" not in text else "\r"  # classic Mac: CR alone
    total = text.count(newline) + (0 if not text or text.endswith(newline) else 1)

    def lines_from(first: int) -> Iterator[str]:
        at, skip = 0, first - 1
        while skip:  # whole blocks counted at C speed, then line by line in the last one
            block = min(len(text), at + _SKIP_BLOCK)
            count = text.count(newline, at, block)
            if count >= skip:
                for _ in range(skip):
                    at = text.find(newline, at) + 1
                break
            skip, at = skip - count, block
            if at >= len(text):
                return
        while at < len(text):
            end = text.find(newline, at)
            end = len(text) if end < 0 else end
            yield text[at:end].removesuffix("\r")
            at = end + 1

    return total, lines_from


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM begins it
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _text_encoding(head: bytes) -> tuple[str, int]:
    """The encoding of a text file and the length of its byte-order mark: UTF-8 unless a BOM
    says otherwise, or the NUL bytes fall on every other byte the way UTF-16 text's do (Windows
    "Unicode" text, saved without a BOM)."""
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding, len(bom)
    even, odd = head[0::2], head[1::2]
    if len(head) >= 4 and b"\x00" in head:
        if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
            return "utf-16-le", 0
        if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
            return "utf-16-be", 0
    return "utf-8", 0


def looks_binary(head: str) -> bool:
    """NUL characters, or more than 10 % control characters other than tab, CR, LF, FF and ESC."""
    if not head:
        return False
    if "\x00" in head:
        return True
    controls = sum(1 for c in head if c < " " and c not in "\t\n\x0c\r\x1b")
    return controls / len(head) > 0.10


def _cut_lines(
    total: int,
    lines_from: Callable[[int], Iterator[str]],
    name: str,
    max_chars: int,
    first: int,
    last: int | None,
) -> DocumentText:
    if first > total:
        return DocumentText("", "line", first, 0, total, f"{name} has {total} lines")
    end = min(total, last or total)
    kept: list[str] = []
    used = 0
    line_no = first - 1
    cut_inside = False
    for line_no, line in zip(range(first, end + 1), lines_from(first), strict=False):
        if used + len(line) + 1 > max_chars:
            if not kept:  # one enormous line: its beginning
                kept.append(line[:max_chars])
                cut_inside = True
            else:
                line_no -= 1
            break
        kept.append(line)
        used += len(line) + 1
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
