"""Image parts: sizes read from data URL headers, OpenAI's tile and patch formulas, the bounds."""

from __future__ import annotations

import base64
import struct
import tracemalloc
import zlib
from typing import Any

import pytest

from memory.context.images import image_size, image_tokens
from memory.context.messages import Message
from memory.context.tokens import TiktokenCounter, count_tokens
from memory.context.trim import trim_history

MB = 1_000_000


def png(width: int, height: int) -> bytes:
    """A valid grey PNG of that size (one zero byte per row: filter 0, black pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00" * ((width + 1) * height))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def jpeg(width: int, height: int, *, exif_bytes: int = 0) -> bytes:
    """A JPEG's leading segments: SOI, an APP1 of ``exif_bytes``, then a baseline SOF0."""
    app1 = b"\xff\xe1" + struct.pack(">H", exif_bytes + 2) + b"\x00" * exif_bytes
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app1 + sof + b"\xff\xd9"


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


def webp_lossless(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    body = b"VP8L" + struct.pack("<I", 5) + b"\x2f" + struct.pack("<I", bits) + b"\x00"
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def webp_extended(width: int, height: int) -> bytes:
    canvas = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4 + canvas
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def webp_lossy(width: int, height: int) -> bytes:
    frame = b"\x00\x00\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    body = b"VP8 " + struct.pack("<I", len(frame)) + frame
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def data_url(image: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(image).decode()


def image_message(url: str, detail: str | None = None) -> Message:
    image: dict[str, Any] = {"url": url} if detail is None else {"url": url, "detail": detail}
    return Message(role="user", content=[{"type": "image_url", "image_url": image}])


@pytest.mark.parametrize(
    ("image", "kind"),
    [
        (png(1024, 768), "png"),
        (jpeg(1024, 768), "jpeg"),
        (jpeg(1024, 768, exif_bytes=60_000), "jpeg"),
        (gif(1024, 768), "gif"),
        (webp_lossless(1024, 768), "webp"),
        (webp_extended(1024, 768), "webp"),
        (webp_lossy(1024, 768), "webp"),
    ],
)
def test_the_size_is_read_from_the_data_url_header(image: bytes, kind: str) -> None:
    assert image_size(data_url(image, kind)) == (1024, 768)


@pytest.mark.parametrize(
    "url",
    ["https://example.com/a.png", "data:image/png,not-base64", "data:image/png;base64,AAAA", ""],
)
def test_an_unreadable_size_is_unknown(url: str) -> None:
    assert image_size(url) is None


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1024, 1024), 765),  # OpenAI's example: scaled to 768 x 768, 4 tiles
        ((2048, 4096), 1105),  # OpenAI's example: 1024 x 2048, then 768 x 1536, 6 tiles
        ((512, 512), 255),  # one tile, never scaled up
        ((4096, 8192), 1105),
        ((100, 4000), 85 + 170 * 4),  # fits 2048 first: 51 x 2048, 4 tiles
    ],
)
def test_high_detail_follows_openais_tile_formula(size: tuple[int, int], tokens: int) -> None:
    assert image_tokens(size, "high", "gpt-4o") == tokens
    assert image_tokens(size, "auto", "gpt-4o") == tokens


def test_low_detail_is_85_whatever_the_size() -> None:
    assert image_tokens((4096, 8192), "low", "gpt-4o") == 85
    assert image_tokens(None, "low", "gpt-4o") == 85


def test_an_unknown_size_costs_the_most_an_image_can() -> None:
    bound = image_tokens(None, "auto", "gpt-4o")
    assert bound == 85 + 170 * 8
    sizes = [(w, h) for w in range(64, 6000, 157) for h in range(64, 6000, 211)]
    assert max(image_tokens(size, "high", "gpt-4o") for size in sizes) == bound


def test_patch_models_count_32px_patches_capped() -> None:
    assert image_tokens((1024, 1024), "auto", "gpt-4.1-mini") == 1024
    assert image_tokens((1800, 2400), "auto", "o4-mini") <= 1536
    assert image_tokens(None, "low", "gpt-4.1-nano") == 1536


def test_the_counter_counts_an_image_by_its_size_and_detail() -> None:
    counter = TiktokenCounter("gpt-4o")
    text_only = counter.count_message(Message.model_construct(role="user", content=[]))
    small = counter.count_message(image_message(data_url(png(300, 200))))
    large = counter.count_message(image_message(data_url(png(1024, 1024))))
    low = counter.count_message(image_message(data_url(png(1024, 1024)), "low"))
    unknown = counter.count_message(image_message("https://example.com/cat.jpg"))
    assert (small - text_only, large - text_only, low - text_only) == (255, 765, 85)
    assert unknown - text_only == 1445


def test_300_one_megabyte_images_do_not_grow_the_cache_past_its_bound() -> None:
    bound = 50_000
    counter = TiktokenCounter("gpt-4o", cache_bytes=bound)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for index in range(300):
            image = png(64, 64) + index.to_bytes(4, "big") * (MB // 4)  # a 1 MB data URL each
            counter.count_message(image_message(data_url(image)))
            del image
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0 < counter.cache_entries < 300  # the oldest were forgotten
    assert counter.cache_bytes <= bound
    # An entry is measured, not assumed: its key by sys.getsizeof, and it is small.
    assert counter.cache_bytes / counter.cache_entries < 2_000
    # What is still allocated after 300 MB of images went through: the bounded cache and
    # interpreter noise, nowhere near one image.
    assert after - before < MB


def test_a_trimmed_history_with_images_fits_by_the_providers_count() -> None:
    # Ten 1024 x 1024 screenshots cost 765 tokens each at OpenAI; counted as a flat 85 they
    # would all be kept, and the request would be 7,650 tokens over a 3,000-token budget.
    history: list[dict[str, Any]] = [{"role": "system", "content": "You look at screenshots."}]
    for turn in range(10):
        image = {"type": "image_url", "image_url": {"url": data_url(png(1024, 1024))}}
        history.append(
            {"role": "user", "content": [{"type": "text", "text": f"shot {turn}"}, image]}
        )
        history.append({"role": "assistant", "content": f"Noted shot {turn}."})
    history.append({"role": "user", "content": "Which one showed the error?"})

    trimmed = trim_history(history, 3_000, model="gpt-4o")

    images = sum(
        1
        for message in trimmed
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    )
    text_only = [
        {**m, "content": [p for p in m["content"] if p["type"] == "text"]}
        if isinstance(m["content"], list)
        else m
        for m in trimmed
    ]
    by_the_provider = count_tokens(text_only, model="gpt-4o") + 765 * images
    assert 0 < images < 10
    assert by_the_provider <= 3_000
    assert trimmed[-1]["content"] == "Which one showed the error?"
