"""Real media for tests, made on the spot: speech from espeak-ng as OGG/Opus (the way Telegram
sends voice notes), photos and PNGs from Pillow, PDFs written by hand (a text layer on each
page, or none), encrypted ones through pypdf, DOCX through python-docx."""

from __future__ import annotations

import io
import os
import subprocess
import zlib
from pathlib import Path

from PIL import Image

from tests.system_tools import need


def speech_ogg(text: str, folder: Path, name: str = "voice") -> bytes:
    """`text` spoken by espeak-ng, converted by ffmpeg to OGG/Opus (mono, 48 kHz)."""
    espeak, ffmpeg = need("espeak-ng"), need("ffmpeg")
    wav, ogg = folder / f"{name}.wav", folder / f"{name}.ogg"
    subprocess.run([espeak, "-w", str(wav), text], check=True, capture_output=True)
    subprocess.run(
        [ffmpeg, "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "libopus", "-b:a", "24k",
         "-ar", "48000", "-ac", "1", str(ogg)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return ogg.read_bytes()


def silence_ogg(seconds: int, folder: Path) -> bytes:
    """`seconds` of silence as OGG/Opus (6 kb/s: two hours is ~2.7 MB), made in about a second
    by encoding 10 s once and repeating it without re-encoding."""
    ffmpeg = need("ffmpeg")
    piece, whole = folder / "silence-10s.ogg", folder / "silence.ogg"
    subprocess.run(
        [ffmpeg, "-loglevel", "error", "-y", "-f", "lavfi", "-i", "anullsrc=r=48000:cl=mono",
         "-t", "10", "-c:a", "libopus", "-b:a", "6k", str(piece)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [ffmpeg, "-loglevel", "error", "-y", "-stream_loop", str(seconds // 10 - 1), "-i",
         str(piece), "-c", "copy", str(whole)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return whole.read_bytes()


def jpeg(width: int, height: int, color: tuple[int, int, int] = (200, 80, 40)) -> bytes:
    image = Image.new("RGB", (width, height), color)
    for x in range(0, width, max(1, width // 16)):  # some detail, so it is not all one colour
        image.paste((20, 20, 20), (x, 0, min(width, x + 3), height))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def noisy_png(width: int, height: int) -> bytes:
    """A PNG of random pixels: it does not compress, so its size is about width*height*3."""
    image = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)
    return out.getvalue()


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(pages: list[str] | int, *, text_layer: bool = True) -> bytes:
    """A PDF written by hand: one page per string (an int: that many numbered pages), each
    drawn in Helvetica — or, without `text_layer`, only a drawn rectangle (a "scan")."""
    texts = (
        [f"Page {i + 1} of the long book" for i in range(pages)]
        if isinstance(pages, int)
        else pages
    )
    objects: list[bytes] = []
    font_id = 3
    page_ids = []
    body: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for text in texts:
        if text_layer:
            lines = [
                f"BT /F1 12 Tf 72 {720 - 16 * n} Td ({_pdf_escape(line)}) Tj ET"
                for n, line in enumerate(text.split("\n"))
            ]
            stream = "\n".join(lines).encode("latin-1")
        else:
            stream = b"0.5 g 72 72 400 600 re f"
        content_id = len(body) + 1
        body.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        page_id = len(body) + 1
        body.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (content_id, font_id)
        )
        page_ids.append(page_id)
    body[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    kids = b" ".join(b"%d 0 R" % i for i in page_ids)
    body[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_ids))
    del objects
    return _pdf_file(body, b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")


def flate_pdf(contents: list[bytes]) -> bytes:
    """A PDF with one page per item of `contents`: its drawing instructions, FlateDecode
    compressed (a few kilobytes can hold megabytes of them), Helvetica as /F1."""
    body = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for content in contents:
        packed = zlib.compress(content, 9)
        body.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed)
        body[-1] += b"\nendstream"
        body.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % (len(body))
        )
        kids.append(b"%d 0 R" % len(body))
    body[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    return _pdf_file(body, b"%PDF-1.4\n")


def _pdf_file(body: list[bytes], header: bytes) -> bytes:
    """A PDF of the numbered objects `body` (object 1 the catalog), with its cross-reference
    table and trailer."""
    out = io.BytesIO()
    out.write(header)
    offsets = []
    for number, obj in enumerate(body, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, obj))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(body) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(body) + 1, xref)
    )
    return out.getvalue()


def encrypted_pdf(password: str = "s3cret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf(["Secret booking number"]))))
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_file(paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
