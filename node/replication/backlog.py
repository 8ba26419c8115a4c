"""The replication backlog: the last bytes of the effect stream, for partial resyncs."""

from __future__ import annotations

from collections import deque


class Backlog:
    """The last `size` bytes (at least) of the effect stream, for partial resyncs.

    Held as a deque of chunks (one per flush, so a handful per loop iteration); whole chunks
    are dropped from the front while the rest still covers `size` bytes. `start` is the effect
    offset just before the first byte held, so the backlog covers offsets (start, end].
    """

    __slots__ = ("size", "chunks", "histlen", "start")

    def __init__(self, size: int, start: int) -> None:
        self.size = size
        self.chunks: deque[bytes] = deque()
        self.histlen = 0
        self.start = start

    @property
    def end(self) -> int:
        return self.start + self.histlen

    def reset(self, start: int) -> None:
        self.chunks.clear()
        self.histlen = 0
        self.start = start

    def append(self, data: bytes) -> None:
        self.chunks.append(data)
        self.histlen += len(data)
        chunks = self.chunks
        while self.histlen - len(chunks[0]) >= self.size:
            n = len(chunks.popleft())
            self.histlen -= n
            self.start += n

    def resize(self, size: int) -> None:
        self.size = size
        chunks = self.chunks
        while chunks and self.histlen - len(chunks[0]) >= size:
            n = len(chunks.popleft())
            self.histlen -= n
            self.start += n

    def covers(self, offset: int) -> bool:
        """Whether a replica that holds `offset` bytes can continue from here."""
        return self.start <= offset <= self.end

    def since(self, offset: int) -> list[bytes]:
        """The bytes after `offset` (which `covers`), as chunks."""
        skip = offset - self.start
        out = []
        for ch in self.chunks:
            if skip >= len(ch):
                skip -= len(ch)
                continue
            out.append(ch[skip:] if skip else ch)
            skip = 0
        return out
