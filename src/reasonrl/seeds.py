"""Seeds that are the same in every process (unlike Python's ``hash`` of a string)."""

from __future__ import annotations

import hashlib


def stable_seed(*parts: object) -> int:
    """A 31-bit seed from any parts, the same in every process, rank and Ray worker."""
    digest = hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
