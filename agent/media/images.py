"""Photos and image files made fit for a model, with Pillow.

    image = prepare_image(data, max_pixels=100_000_000)   # ImageError when it is not an image
    image.data, image.media_type, image.width, image.height

Every provider's limits at once: the long edge at most 1,568 px (Anthropic resizes anything
bigger, and bills it), JPEG, PNG, WebP or GIF, and under 3.75 MB (5 MB once base64-encoded, the
strictest provider's cap). An image already inside all of that is sent as it came; anything else
is decoded once (a JPEG at a reduced scale, which keeps a 12-megapixel photo's decode fast;
never a second full-size copy), shrunk, turned upright by its EXIF orientation and encoded as
JPEG (PNG when it has transparency). An animated GIF sends its first frame. A file bigger than
`max_pixels` is refused before it is decoded (a "decompression bomb" could take gigabytes).
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass, field

from PIL import Image, ImageOps, UnidentifiedImageError

MAX_EDGE = 1568
MAX_BYTES = 3_750_000
JPEG_QUALITY = 85
MEDIA_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".heic")


class ImageError(Exception):
    """Not readable as an image; the message says why in one line."""


@dataclass(frozen=True)
class PreparedImage:
    data: bytes = field(repr=False)
    media_type: str
    width: int
    height: int
    original_size: tuple[int, int]  # the received image's pixels
    resized: bool  # re-encoded (False: the received bytes are sent as they are)

    @property
    def suffix(self) -> str:
        return {"image/jpeg": ".jpg", "image/png": ".png"}.get(self.media_type, ".img")


def is_image(mime: str | None, name: str | None) -> bool:
    """Whether a file is an image, by its type or its name."""
    if mime and mime.lower().startswith("image/"):
        return True
    return bool(name) and str(name).lower().endswith(IMAGE_SUFFIXES)


def prepare_image(data: bytes, *, max_pixels: int) -> PreparedImage:
    """`data` as an image a model takes (see the module docstring); ImageError otherwise."""
    try:
        with warnings.catch_warnings():  # the size is checked here, against our own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            probe = Image.open(io.BytesIO(data))
        with probe:
            width, height = probe.size
            kind = probe.format or ""
            animated = bool(getattr(probe, "is_animated", False))
            oriented = _orientation(probe) in (None, 1)
        if width * height > max_pixels:
            raise ImageError(
                f"the image is {width}×{height} pixels, more than the {max_pixels // 1_000_000} "
                "megapixels Pinch decodes ([media] max_image_megapixels)"
            )
        if (
            kind in MEDIA_TYPES
            and max(width, height) <= MAX_EDGE
            and len(data) <= MAX_BYTES
            and oriented
            and not animated
        ):
            with Image.open(io.BytesIO(data)) as check:
                check.load()  # a truncated or corrupt file fails here, not at the provider
            return PreparedImage(data, MEDIA_TYPES[kind], width, height, (width, height), False)
        return _shrink(data, (width, height))
    except ImageError:
        raise
    except Image.DecompressionBombError:
        raise ImageError("the image has too many pixels to decode safely") from None
    except UnidentifiedImageError:
        raise ImageError("it is not an image Pillow can read (corrupt or unknown format)") from None
    except MemoryError:
        raise
    except Exception as exc:  # Pillow's decoders raise more than OSError on hostile bytes
        raise ImageError(f"the image is damaged ({_reason(exc)})") from None


def _shrink(data: bytes, original: tuple[int, int]) -> PreparedImage:
    # One full-size copy at most: a 100-megapixel PNG of a few hundred kilobytes decodes to
    # 300 MB, and each needless copy (turned upright, converted) would be 300 MB more.
    with Image.open(io.BytesIO(data)) as image:
        if image.format == "JPEG":  # decode at 1/2, 1/4 or 1/8 scale, still over the target: fast
            scale = min(1.0, MAX_EDGE / max(original))
            image.draft("RGB", (math.ceil(original[0] * scale), math.ceil(original[1] * scale)))
        image.seek(0)
        image.load()
        alpha = image.mode in ("RGBA", "LA", "PA") or (
            image.mode == "P" and "transparency" in image.info
        )
        mode = "RGBA" if alpha else "RGB"
        frame = image if image.mode == mode else image.convert(mode)
        frame.thumbnail((MAX_EDGE, MAX_EDGE), Image.Resampling.BICUBIC, reducing_gap=2.0)
        frame = ImageOps.exif_transpose(frame.copy() if frame is image else frame)  # upright
    if alpha:
        out = _encode(frame, "PNG")
        if len(out) <= MAX_BYTES:
            return PreparedImage(out, "image/png", *frame.size, original, True)
        flat = Image.new("RGB", frame.size, "white")
        flat.paste(frame, mask=frame.getchannel("A"))
        frame = flat
    quality = JPEG_QUALITY
    out = _encode(frame, "JPEG", quality=quality)
    while len(out) > MAX_BYTES and quality > 40:
        quality -= 15
        out = _encode(frame, "JPEG", quality=quality)
    while len(out) > MAX_BYTES:  # noise no quality setting tames: fewer pixels
        frame = frame.resize((max(1, frame.width * 3 // 4), max(1, frame.height * 3 // 4)))
        out = _encode(frame, "JPEG", quality=quality)
    return PreparedImage(out, "image/jpeg", *frame.size, original, True)


def _encode(image: Image.Image, kind: str, **options: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, optimize=kind == "PNG", **options)
    return buffer.getvalue()


def _orientation(image: Image.Image) -> int | None:
    if image.format == "PNG" and "exif" not in image.info:
        return None  # Pillow would decode the whole image to look for an eXIf chunk after it
    try:
        value = image.getexif().get(0x0112)
    except Exception:
        return None
    return int(value) if isinstance(value, int) else None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:120]
