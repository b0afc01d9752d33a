"""Documents are read: PDFs made in the test (by hand: a text layer per page, or none; encrypted
through pypdf; 1,000 pages), DOCX from python-docx, text files and a binary file named .txt.
Their text enters the turn as untrusted content with the file's name, cut to [media]
document_chars with a note; `read_file` reads further pages."""

from __future__ import annotations

import asyncio
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pypdf
import pytest

from agent.media.documents import DocumentError, read_document
from agent.media.media_config import MediaConfig, VoiceConfig
from agent.requests import AgentRequest, Final, Notice
from common.attachment import Attachment
from memory.files.inbox import Inbox
from tests.agent_support import OWNER, Kit, make_kit, responder, tool_results
from tests.fakes.model_server import (
    FakeModelServer,
    RecordedRequest,
    Reply,
    text_reply,
    tool_reply,
)
from tests.media_support import docx_file, encrypted_pdf, text_pdf

PDF = "application/pdf"


def echo(request: RecordedRequest) -> Reply:
    return text_reply("noted")


def doc_kit(tmp_path: Path, server: FakeModelServer, chars: int = 20_000) -> Kit:
    media = MediaConfig(document_chars=chars)
    return make_kit(tmp_path, server, media=(VoiceConfig(), media))


def save(kit: Kit, name: str, data: bytes, mime: str) -> Attachment:
    rel = Inbox(kit.workspace).save(name, data, datetime.now(UTC))
    return Attachment("document", rel, name, mime, len(data))


async def run(kit: Kit, request: AgentRequest) -> tuple[str, list[str]]:
    notices, reply = [], ""
    async for event in kit.agent.run(request):
        if isinstance(event, Notice):
            notices.append(event.text)
        elif isinstance(event, Final):
            reply = event.reply.text
    return reply, notices


def user_texts(request: RecordedRequest) -> str:
    """Every text block of the newest user message."""
    user = [m for m in request.body["messages"] if m["role"] == "user"][-1]
    return "\n".join(b.get("text", "") for b in user["content"] if b.get("type") == "text")


def test_a_pdf_enters_the_turn_as_untrusted_text_cut_with_a_note_then_read_by_page(
    tmp_path: Path,
) -> None:
    pages = [f"Booking confirmation page {i}\nReference ABC-{i:03d}" for i in range(1, 41)]

    async def scenario() -> None:
        with FakeModelServer() as server:
            kit = doc_kit(tmp_path, server, chars=1_000)
            pdf = save(kit, "Booking.pdf", text_pdf(pages), PDF)
            server.script(
                tool_reply("read_file", {"path": pdf.path, "pages": "30-31"}),
                text_reply("Page 30 says ABC-030."),
            )
            reply, notices = await run(
                kit, AgentRequest(OWNER, "what is in it?", attachments=(pdf,))
            )
            assert notices == [] and reply == "Page 30 says ABC-030."
            first = user_texts(server.requests[0])
            assert '<untrusted source="document Booking.pdf (' + str(pdf.path) in first
            assert "outside content" in first and "Reference ABC-001" in first
            assert "Reference ABC-040" not in first  # cut to document_chars
            assert "left out: pages" in first and f'read_file path="{pdf.path}" pages=' in first
            [result] = tool_results(server.requests[1])
            assert (
                "Reference ABC-030" in result["content"]
                and "Reference ABC-031" in result["content"]
            )
            assert "ABC-029" not in result["content"] and not result["is_error"]
            assert "<untrusted" in result["content"]

    asyncio.run(scenario())


def test_docx_and_text_files_are_read_and_a_binary_txt_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = doc_kit(tmp_path, server)
            letter = save(
                kit,
                "letter.docx",
                docx_file(["Dear Olive,", "your appointment is on 3 March."]),
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            )
            csv = save(kit, "costs.csv", b"item,eur\nhotel,310\ntrain,89\n", "text/csv")
            fake = save(
                kit, "notes.txt", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8, "text/plain"
            )
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(letter, csv, fake)))
        texts = user_texts(server.requests[0])
        assert "your appointment is on 3 March." in texts and "hotel,310" in texts
        assert notices == [
            "(I couldn't read notes.txt: notes.txt holds binary data, not text (whatever its "
            "name says).)"
        ]
        assert "not read: notes.txt holds binary data" in texts

    asyncio.run(scenario())


def test_a_scanned_and_an_encrypted_pdf_are_said_so(tmp_path: Path) -> None:
    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=echo))
            kit = doc_kit(tmp_path, server)
            scan = save(kit, "scan.pdf", text_pdf(3, text_layer=False), PDF)
            locked = save(kit, "locked.pdf", encrypted_pdf(), PDF)
            _, notices = await run(kit, AgentRequest(OWNER, "", attachments=(scan, locked)))
        assert len(notices) == 2
        assert "scan.pdf has no text layer" in notices[0]
        assert "locked.pdf is encrypted (password-protected)" in notices[1]
        assert "Secret booking number" not in str(server.requests[0].body)

    asyncio.run(scenario())


def test_a_pdf_with_an_empty_user_password_opens(tmp_path: Path) -> None:
    path = tmp_path / "open.pdf"
    path.write_bytes(encrypted_pdf(""))
    doc = read_document(path, "open.pdf", max_chars=1_000)
    assert "Secret booking number" in doc.text


def test_a_1000_page_pdf_costs_only_the_pages_that_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "book.pdf"
    path.write_bytes(text_pdf(1_000))
    # Count the pages whose text is extracted (the real pypdf call, only counted): the cost is
    # bounded by the pages that fit, not the book (time is for bench/media.py, not a test).
    extracted: list[int] = []
    real = pypdf.PageObject.extract_text

    def counting(page: pypdf.PageObject, *args: Any, **kwargs: Any) -> str:
        extracted.append(1)
        return real(page, *args, **kwargs)

    monkeypatch.setattr(pypdf.PageObject, "extract_text", counting)
    tracemalloc.start()
    doc = read_document(path, "book.pdf", max_chars=20_000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert doc.total == 1_000 and 1 < doc.last < 1_000
    assert doc.note == f"showed pages 1-{doc.last} of 1000; left out: pages {doc.last + 1}-1000"
    assert len(extracted) <= doc.last + 1  # the pages shown, and at most one that did not fit
    assert peak < 40 * 1024 * 1024
    tail = read_document(path, "book.pdf", max_chars=20_000, first=998)
    assert (tail.first, tail.last) == (998, 1000) and "Page 1000 of the long book" in tail.text
    assert tail.note == "showed pages 998-1000 of 1000; left out: pages 1-997"


def test_a_file_that_is_not_a_pdf_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.pdf"
    path.write_bytes(b"<html>not a pdf</html>")
    with pytest.raises(DocumentError, match=r"^x.pdf is not a readable PDF"):
        read_document(path, "x.pdf", max_chars=1_000)


def test_a_documents_text_is_findable_later_as_untrusted_and_taints_the_turn(
    tmp_path: Path,
) -> None:
    from memory.index.transcript_indexer import index_transcript

    async def scenario() -> None:
        with FakeModelServer() as server:
            server.respond_with(responder(turn=text_reply("The code is ZEBRA-7781.")))
            kit = doc_kit(tmp_path, server)
            memo = save(kit, "memo.txt", b"The door code is ZEBRA-7781.\n", "text/plain")
            await run(kit, AgentRequest(OWNER, "what is the code?", attachments=(memo,)))
            session = kit.store.current(OWNER)
            index_transcript(kit.index, session, kit.store.events(session.id))
            hits = kit.index.search("ZEBRA-7781", scopes=["", OWNER.memory_scope])
        assert hits and all(h.untrusted for h in hits)  # the document, and the answer repeating it
        assert any("Document (memo.txt)" in h.snippet for h in hits)

    asyncio.run(scenario())
