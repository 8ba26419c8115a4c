"""Redis glob patterns (stringmatchlen): `*`, `?`, `[abc]`, `[^a-z]`, and backslash escapes.

fnmatch differs from Redis (`[!...]`, no escapes), so KEYS, SCAN MATCH and CONFIG GET use this.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=256)
def _compile(pattern: bytes, nocase: bool) -> re.Pattern[bytes]:
    out = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i:i + 1]
        if ch == b"*":
            out.append(b".*")
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
    return re.compile(b"".join(out), re.DOTALL | (re.IGNORECASE if nocase else 0))


def stringmatch(pattern: bytes, s: bytes, nocase: bool = False) -> bool:
    if pattern == b"*":
        return True
    return _compile(pattern, nocase).fullmatch(s) is not None
