"""docs/swagger-ui.png, and the list of the operations it shows, kept inside it.

The README shows the picture, and a test must know what it shows without
reading its pixels. The browser test that takes it writes the operations
on the page (``METHOD /path summary``, one a line, sorted) into an iTXt
chunk of the PNG, which image viewers ignore; tests/docs/test_screenshot.py
compares that list with the schema's, with no browser. iTXt rather than
tEXt: a summary is UTF-8, and tEXt holds Latin-1 alone.
"""

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PICTURE = ROOT / "docs" / "swagger-ui.png"
# The README loads the picture with the page: it stays well below what a
# slow connection fetches in a second or two.
MAX_PICTURE_BYTES = 400_000
REFRESH = "make screenshot"

SIGNATURE = b"\x89PNG\r\n\x1a\n"
KEYWORD = b"Operations"
# keyword NUL, no compression (flag 0, method 0), no language tag NUL, no
# translated keyword NUL.
ITXT_HEADER = KEYWORD + b"\x00\x00\x00\x00\x00"
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def operation_lines(schema: dict[str, Any]) -> list[str]:
    """Each operation of an OpenAPI schema as Swagger UI heads its block, sorted."""
    return sorted(
        f"{method.upper()} {path} {operation.get('summary', '')}".rstrip()
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    )


def difference(pictured: list[str] | None, operations: list[str]) -> str:
    """What the picture lacks and what it shows in vain, for a failure's message."""
    if pictured is None:
        return "it names no operations"
    lacks = [line for line in operations if line not in pictured]
    extra = [line for line in pictured if line not in operations]
    told = []
    if lacks:
        told.append(f"it lacks {', '.join(lacks)}")
    if extra:
        told.append(f"it shows {', '.join(extra)}, which are gone")
    return "; ".join(told)


def _chunks(png: bytes) -> Iterator[tuple[bytes, bytes]]:
    if not png.startswith(SIGNATURE):
        raise ValueError("not a PNG")
    at = len(SIGNATURE)
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        if zlib.crc32(kind + data) != crc:
            raise ValueError(f"the PNG's {kind!r} chunk at byte {at} is damaged")
        yield kind, data
        at += 12 + length


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def with_operations(png: bytes, operations: list[str]) -> bytes:
    """``png`` with ``operations`` written in, just after its header chunk."""
    header_end = len(SIGNATURE) + 12 + struct.unpack(">I", png[8:12])[0]
    text = ITXT_HEADER + "\n".join(operations).encode()
    return png[:header_end] + _chunk(b"iTXt", text) + png[header_end:]


def operations_of(png: bytes) -> list[str] | None:
    """The operations written into ``png``, or None when none were."""
    for kind, data in _chunks(png):
        if kind == b"iTXt" and data.startswith(ITXT_HEADER):
            return data[len(ITXT_HEADER) :].decode().splitlines()
    return None
