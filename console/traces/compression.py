"""Compressed uploads: a gzip file of any format is read through ``gzip.GzipFile``, streaming, never
decompressed whole into memory or onto disk.

The size limit applies to the decompressed bytes (a few kilobytes of gzip can expand to gigabytes), so
the stream is read once up front, counting, before anything is parsed or stored: a gzip bomb and a
corrupt or truncated file are refused there with a clear error. The later passes (format detection,
parsing) rewind the same ``GzipFile`` and decompress again; they see exactly the bytes counted.
"""

from __future__ import annotations

import gzip
import zlib
from typing import IO, cast

from console.traces.errors import ErrorLog

GZIP_MAGIC = b"\x1f\x8b"
READ_CHUNK = 1 << 20
SUFFIXES = (".gz", ".gzip")


def is_gzip(file: IO[bytes]) -> bool:
    """Whether the file starts with the gzip magic bytes (the name is not trusted either way)."""
    file.seek(0)
    head = file.read(2)
    file.seek(0)
    return head == GZIP_MAGIC


def inner_filename(filename: str) -> str:
    """The name without a ``.gz`` suffix: what format detection and file-name hints look at."""
    lower = filename.lower()
    for suffix in SUFFIXES:
        if lower.endswith(suffix) and len(filename) > len(suffix):
            return filename[: -len(suffix)]
    return filename


def gzip_open_checked(file: IO[bytes], *, filename: str, max_bytes: int) -> tuple[IO[bytes], int]:
    """A rewound ``GzipFile`` over ``file`` and its decompressed size, after one counting pass.

    Raises ``TraceImportError`` when the decompressed bytes pass ``max_bytes`` (reading stops there),
    when the gzip data is corrupt or truncated, or when it holds nothing.
    """
    file.seek(0)
    stream = gzip.GzipFile(fileobj=file, mode="rb")
    size = 0
    blank = True
    try:
        while chunk := stream.read(READ_CHUNK):
            size += len(chunk)
            if size > max_bytes:
                ErrorLog.fail(
                    f"the file decompresses to more than the size limit of {max_bytes:,} bytes "
                    f"(SPECREVIEW_TRACE_MAX_BYTES, applied to the decompressed data); refused after "
                    f"decompressing {size:,} bytes",
                    file=filename,
                )
            if blank and chunk.strip(b"\xef\xbb\xbf \t\r\n"):
                blank = False
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        ErrorLog.fail(f"not a valid gzip file (corrupt or truncated): {exc}", file=filename)
    if blank:
        ErrorLog.fail("the file is empty once decompressed", file=filename)
    stream.seek(0)
    return cast(IO[bytes], stream), size
