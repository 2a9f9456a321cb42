"""The README's picture of Swagger UI shows the operations the schema has.

tests/docs/test_docs_browser.py takes docs/swagger-ui.png from the running
service and writes into it the operations it shows (tests/docs/screenshot.py);
this test reads them back with no browser, so the quick loop fails as soon
as an endpoint is added, removed or renamed without a new picture.
"""

import json
import struct
import zlib
from typing import Any

from django.test import Client

from tests.docs.screenshot import (
    MAX_PICTURE_BYTES,
    PICTURE,
    REFRESH,
    SIGNATURE,
    difference,
    operation_lines,
    operations_of,
    with_operations,
)


def _schema() -> dict[str, Any]:
    response = Client().get("/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    schema: dict[str, Any] = json.loads(response.content)
    return schema


def test_the_picture_shows_every_operation_of_the_schema() -> None:
    pictured = operations_of(PICTURE.read_bytes())
    operations = operation_lines(_schema())

    assert pictured == operations, (
        f"docs/swagger-ui.png is out of date ({difference(pictured, operations)}):"
        f" `{REFRESH}` takes it again from the running service; commit it"
    )


def test_the_picture_stays_small_enough_for_the_readme() -> None:
    assert PICTURE.stat().st_size < MAX_PICTURE_BYTES


def test_the_operations_written_in_are_read_back_from_a_valid_png() -> None:
    # A 1x1 grey picture: the header, one row of pixels, the end.
    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    png = SIGNATURE + b"".join(
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        for kind, data in [
            (b"IHDR", header),
            (b"IDAT", zlib.compress(b"\x00\x80")),
            (b"IEND", b""),
        ]
    )
    lines = ["GET /v1/orders List orders", "POST /v1/webhook-endpoints Subscribe é"]

    written = with_operations(png, lines)

    assert operations_of(png) is None
    assert operations_of(written) == lines
    # The chunk goes between the header and the pixels, as PNG requires.
    assert written.index(b"iTXt") < written.index(b"IDAT")
