"""Hand memory that loaders and the tokenizer freed back to the operating system.

Reading a large file leaves freed memory in pyarrow's pool and in the C heap, where it still
counts as resident and training would carry it to the end: measured on 40,000 long texts,
about 100 MB (47 MB in pyarrow's pool after loading, 42 MB of heap after encoding). Freed
memory only; nothing in use is touched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache


@cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None  # glibc only
    except (OSError, AttributeError):
        return None


def release_unused_memory() -> None:
    """Return free pages of pyarrow's pool (when it was used) and of the C heap (glibc)."""
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
