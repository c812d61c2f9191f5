"""What an image part costs in tokens: OpenAI's documented formulas, sized from the data URL.

An image in a data URL (``data:image/png;base64,...``) has its width and height read from the
file header (PNG, JPEG, GIF, WebP); only a bounded prefix is decoded, so a 20 MB image costs
the same to size as a small one. An image given by address (or in a format whose header is not
read) has no known size and is counted at the most its model can charge for one image, so a
request with images is never over the window because of them.

The formulas (OpenAI, "Images and vision", calculating costs):

- tile models (gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3, and any model not listed below):
  ``detail: low`` costs 85; otherwise the image is scaled to fit 2048 x 2048, then its shortest
  side scaled down to 768, and it costs 85 + 170 per 512 px tile. At most 8 tiles fit, so an
  image of unknown size costs 1,445. (gpt-5 and o1/o3 document slightly lower numbers, and
  gpt-4o-mini bills each image at about 33 times these tokens as a pricing rule; 85 / 170 is
  counted for all of them: an upper bound of what the image takes of the window.)
- patch models (gpt-4.1-mini, gpt-4.1-nano, gpt-5-mini, gpt-5-nano, o4-mini): one token per
  32 x 32 px patch, at most 1,536 (a larger image is scaled down to fit); ``detail`` does not
  lower it. Their documented multipliers are pricing, not window use.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "IMAGE_LOW_DETAIL_TOKENS",
    "image_part_tokens",
    "image_size",
    "image_tokens",
]

#: A tile model's cost of an image at ``detail: low``, and the base of every image.
IMAGE_LOW_DETAIL_TOKENS = 85
#: A tile model's cost of each 512 px tile at high detail.
TILE_TOKENS = 170
TILE_PX = 512
#: The box a high-detail image is first scaled into, then the length of its shortest side.
FIT_PX, SHORT_SIDE_PX = 2048, 768
#: Patch models: the side of a patch and the most patches one image may take.
PATCH_PX, MAX_PATCHES = 32, 1536
#: Model name prefixes (after any ``provider/``) that count images by patches.
PATCH_MODELS = ("gpt-4.1-mini", "gpt-4.1-nano", "gpt-5-mini", "gpt-5-nano", "o4-mini")
#: Base64 characters decoded to find a size: enough for a JPEG with a large EXIF block first.
HEADER_B64_CHARS = 128 * 1024


def image_part_tokens(part: Mapping[str, Any], model: str) -> int:
    """Tokens of one non-text content part of a message to ``model``.

    An ``image_url`` part is sized from its data URL when it can be, else it gets the largest
    cost one image may have for the model. Any other part (audio, a file) gets that same figure:
    an estimate only, since their cost follows their length, which is not read here.
    """
    image = part.get("image_url")
    url = detail = None
    if isinstance(image, Mapping):
        url, detail = image.get("url"), image.get("detail")
    elif isinstance(image, str):
        url = image
    size = image_size(url) if isinstance(url, str) else None
    return image_tokens(size, detail if isinstance(detail, str) else "auto", model)


def image_tokens(size: tuple[int, int] | None, detail: str, model: str) -> int:
    """Tokens of an image of ``size`` (width, height; ``None`` when unknown) for ``model``."""
    if _is_patch_model(model):
        if size is None:
            return MAX_PATCHES
        return _patches(*size)
    if detail == "low":
        return IMAGE_LOW_DETAIL_TOKENS
    if size is None:
        most_tiles = math.ceil(SHORT_SIDE_PX / TILE_PX) * math.ceil(FIT_PX / TILE_PX)
        return IMAGE_LOW_DETAIL_TOKENS + TILE_TOKENS * most_tiles
    return IMAGE_LOW_DETAIL_TOKENS + TILE_TOKENS * _tiles(*size)


def _is_patch_model(model: str) -> bool:
    return model.lower().rsplit("/", 1)[-1].startswith(PATCH_MODELS)


def _tiles(width: int, height: int) -> int:
    """512 px tiles of a high-detail image after OpenAI's two scaling steps."""
    scale = min(1.0, FIT_PX / max(width, height))
    scale *= min(1.0, SHORT_SIDE_PX / (min(width, height) * scale))
    across, down = math.floor(width * scale), math.floor(height * scale)
    return math.ceil(across / TILE_PX) * math.ceil(down / TILE_PX)


def _patches(width: int, height: int) -> int:
    """32 px patches of an image, scaled down (whole patches across) when over the cap."""
    patches = math.ceil(width / PATCH_PX) * math.ceil(height / PATCH_PX)
    if patches <= MAX_PATCHES:
        return patches
    shrink = math.sqrt(PATCH_PX * PATCH_PX * MAX_PATCHES / (width * height))
    across, down = width * shrink / PATCH_PX, height * shrink / PATCH_PX
    shrink *= min(math.floor(across) / across, math.floor(down) / down)
    scaled = math.ceil(width * shrink / PATCH_PX) * math.ceil(height * shrink / PATCH_PX)
    return min(scaled, MAX_PATCHES)


def image_size(url: str) -> tuple[int, int] | None:
    """Width and height of a base64 data URL's PNG, JPEG, GIF or WebP image; else ``None``."""
    head, comma, _ = url[:256].partition(",")
    if not comma or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    start = len(head) + 1
    chunk = url[start : start + HEADER_B64_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        header = base64.b64decode(chunk, validate=False)
    except (binascii.Error, ValueError):
        return None
    for reader in (_png_size, _gif_size, _webp_size, _jpeg_size):
        size = reader(header)
        if size is not None:
            return size if size[0] > 0 and size[1] > 0 else None
    return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR" or len(data) < 24:
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _gif_size(data: bytes) -> tuple[int, int] | None:
    if data[:6] not in (b"GIF87a", b"GIF89a") or len(data) < 10:
        return None
    return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")


def _webp_size(data: bytes) -> tuple[int, int] | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    chunk = data[12:16]
    if chunk == b"VP8L" and len(data) >= 25:
        # Lossless: 14-bit sizes minus one, packed after the signature byte.
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if len(data) < 30:
        return None
    if chunk == b"VP8 ":  # lossy: 14-bit sizes after the frame tag and start code
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        return width, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8X":  # extended: 24-bit canvas sizes minus one
        width = int.from_bytes(data[24:27], "little") + 1
        return width, int.from_bytes(data[27:30], "little") + 1
    return None


#: JPEG start-of-frame markers (every SOFn but DHT C4, JPG C8 and DAC CC).
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD})
_SOF_MARKERS |= {0xCE, 0xCF}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    if data[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker in _SOF_MARKERS:
            height = int.from_bytes(data[at + 5 : at + 7], "big")
            return int.from_bytes(data[at + 7 : at + 9], "big"), height
        if marker == 0x01 or 0xD0 <= marker <= 0xD9:  # markers without a length
            at += 2
            continue
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return None
