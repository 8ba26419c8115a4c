"""The effect log: the one place where writes become deterministic RESP commands.

Every write is reduced to effects (DESIGN §1) that a replica or a restart can apply blindly. The
same bytes feed the AOF and the replication stream, and their running length is the replication
offset. Consumers subscribe with `listen`; with none, emitting costs a counter increment.
"""

from __future__ import annotations

from collections.abc import Callable

from node.resp import encode_command


class EffectLog:
    __slots__ = ("offset", "listeners", "_batch", "in_multi")

    def __init__(self) -> None:
        self.offset = 0
        self.listeners: list[Callable[[bytes], None]] = []
        self._batch: list[bytes] | None = None
        self.in_multi = False

    def listen(self, fn: Callable[[bytes], None]) -> None:
        self.listeners.append(fn)

    def emit(self, argv: list[bytes]) -> None:
        if not self.listeners:
            return
        data = encode_command(argv)
        if self._batch is not None:
            self._batch.append(data)
            return
        self._publish(data)

    def begin_transaction(self) -> None:
        """Effects of EXEC are wrapped in MULTI/EXEC so that they apply atomically."""
        self._batch = []

    def end_transaction(self) -> None:
        batch, self._batch = self._batch, None
        if batch:
            if len(batch) > 1:
                batch.insert(0, encode_command([b"MULTI"]))
                batch.append(encode_command([b"EXEC"]))
            self._publish(b"".join(batch))

    def _publish(self, data: bytes) -> None:
        self.offset += len(data)
        for fn in self.listeners:
            fn(data)
