"""Redis glob patterns (stringmatchlen): `*`, `?`, `[abc]`, `[^a-z]`, and backslash escapes.

fnmatch differs from Redis (`[!...]`, no escapes), so KEYS, SCAN MATCH and CONFIG GET use this.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=256)
def _compile(pattern: bytes, nocase: bool) -> tuple[tuple[re.Pattern[bytes], int], ...]:
    """The pattern's parts between its stars: (regex, length) each. Every part matches a
    fixed number of bytes (one per `?`, class or literal), which is what lets `stringmatch`
    place them left to right without backtracking."""
    out: list[bytes] = []
    parts: list[list[bytes]] = [out]
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i:i + 1]
        if ch == b"*":
            out = []
            parts.append(out)
        elif ch == b"?":
            out.append(b".")
        elif ch == b"\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i:i + 1]))
        elif ch == b"[":
            j = i + 1
            neg = j < n and pattern[j:j + 1] == b"^"
            if neg:
                j += 1
            items = []
            while j < n and pattern[j:j + 1] != b"]":
                if pattern[j:j + 1] == b"\\" and j + 1 < n:
                    items.append(re.escape(pattern[j + 1:j + 2]))
                    j += 2
                elif j + 2 < n and pattern[j + 1:j + 2] == b"-" and pattern[j + 2:j + 3] != b"]":
                    a, b = sorted((pattern[j], pattern[j + 2]))
                    items.append(re.escape(bytes([a])) + b"-" + re.escape(bytes([b])))
                    j += 3
                else:
                    items.append(re.escape(pattern[j:j + 1]))
                    j += 1
            body = b"".join(items)
            if not body:  # "[]" matches nothing, "[^]" anything
                out.append(b"." if neg else b"(?!)")
            else:
                out.append(b"[" + (b"^" if neg else b"") + body + b"]")
            i = j  # at ']' (or end of pattern)
        else:
            out.append(re.escape(ch))
        i += 1
    flags = re.DOTALL | (re.IGNORECASE if nocase else 0)
    return tuple((re.compile(b"".join(p), flags), len(p)) for p in parts)


def stringmatch(pattern: bytes, s: bytes, nocase: bool = False) -> bool:
    """Redis stringmatchlen. Between two stars the leftmost place a part fits is always the
    best one, so each part is searched once: O(len(s) x len(pattern)) at worst. One regex
    with `.*` per star backtracks exponentially (`?*?*?*?*?*?*?*?*x` against a 100-byte key
    held the node for minutes), the hang Redis fixed in 7.0.9 (CVE-2022-36021)."""
    if pattern == b"*":
        return True
    parts = _compile(pattern, nocase)
    first, size = parts[0]
    if len(parts) == 1:
        return first.fullmatch(s) is not None
    if first.match(s) is None:
        return False
    pos = size
    for part, size in parts[1:-1]:
        if size:
            m = part.search(s, pos)
            if m is None:
                return False
            pos = m.end()
    last, size = parts[-1]
    start = len(s) - size
    return start >= pos and last.fullmatch(s, start) is not None
