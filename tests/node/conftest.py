"""Fixtures of the node tests that several test modules share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.conftest import NodeHandle
from tests.support.replset import ReplicaSet


@pytest.fixture
def rset(xnode: Callable[..., NodeHandle]) -> Iterator[Callable[..., ReplicaSet]]:
    made: list[ReplicaSet] = []

    def make(n: int = 2, primary_args: tuple = (), replica_args: tuple = ()) -> ReplicaSet:
        rs = ReplicaSet(xnode, n, primary_args, replica_args)
        made.append(rs)
        return rs

    yield make
    for rs in made:
        rs.close()
