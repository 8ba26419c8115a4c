"""Which partition an XACK's IDs name (router/pstreamids.py): the compiled function and its
interpreted twin against a plain model of the rule.

The rule: an ID's sequence number is the digits after its last `-` (1 to 20 of them, at
most 2**64 - 1), its partition that number mod the stride; the IDs of one request go to one
partition only when every one of them names the same existing partition. Anything else
(-1) takes the split path, which parses each ID as Redis does (tests/router/test_pstreams.py
checks its errors against a plain stream's).
"""

from __future__ import annotations

import importlib.util
import random
import re
from types import ModuleType

import pytest

from node import native
from node.streamid import SEQ_MAX, parse_id

SOURCE = native._ROOT / "router" / "pstreamids.py"


@pytest.fixture(scope="module", params=["interpreted", "compiled"])
def ids(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "interpreted":  # the source itself, whatever is built beside it
        spec = importlib.util.spec_from_file_location("pstreamids_interpreted", SOURCE)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        assert not mod.cython.compiled
        return mod
    if not native.compiled():
        pytest.skip("the extensions are not built (python setup.py build_ext --inplace)")
    import router.pstreamids as mod
    assert mod.__file__ is not None and not mod.__file__.endswith(".py")
    return mod


def model(ids: list[bytes], stride: int, n: int) -> int:
    parts = set()
    for b in ids:
        m = re.search(rb"-([0-9]{1,20})\Z", b)
        if m is None or int(m.group(1)) > SEQ_MAX:
            return -1
        parts.add(int(m.group(1)) % stride)
    if len(parts) != 1:
        return -1
    p = parts.pop()
    return p if p < n else -1


EDGES = [b"1-5", b"0-0", b"1-18446744073709551615", b"1-18446744073709551616",
         b"1-99999999999999999999", b"1-123456789012345678901", b"1-", b"-", b"", b"1", b"-5",
         b"1-005", b"1-+5", b"1- 5", b"1-5 ", b"1-5_0", b"a-b-7", b"1-3-1", b"1-\xd9\xa3",
         b"1-\x00", b"18446744073709551615-18446744073709551615"]


@pytest.mark.parametrize("b", EDGES)
def test_one_id_at_the_edges(ids: ModuleType, b: bytes) -> None:
    for stride, n in ((1024, 1024), (1024, 12), (7, 7), (1, 1)):
        assert ids.one_partition([b], stride, n) == model([b], stride, n), (b, stride, n)


def test_requests_of_many_ids(ids: ModuleType) -> None:
    rnd = random.Random(27)
    stride, n = 1024, 12
    def an_id() -> bytes:
        if rnd.random() < 0.05:
            return rnd.choice(EDGES)
        seq = rnd.choice([rnd.randrange(64) * stride + rnd.randrange(16),
                          rnd.randrange(SEQ_MAX + 1)])
        return b"%d-%d" % (rnd.randrange(2**45), seq)
    one = 0
    for _ in range(3000):
        req = [an_id() for _ in range(rnd.choice([1, 2, 5, 100]))]
        if rnd.random() < 0.5:  # one read's IDs: one partition
            p = rnd.randrange(16)
            req = [b"%d-%d" % (rnd.randrange(2**45), rnd.randrange(10**6) * stride + p)
                   for _ in req]
        got = ids.one_partition(req, stride, n)
        assert got == model(req, stride, n), req
        one += got >= 0
    assert one > 300  # the one-partition answer was exercised, not only -1


def test_agrees_with_the_id_parser_on_valid_ids(ids: ModuleType) -> None:
    """For an ID Redis accepts, the partition is the parsed ID's (PStream.partition_of)."""
    rnd = random.Random(8)
    for _ in range(2000):
        b = b"%d-%d" % (rnd.randrange(SEQ_MAX + 1), rnd.randrange(SEQ_MAX + 1))
        sid = parse_id(b, strict=True)
        assert sid is not None
        assert ids.one_partition([b], 1024, 1024) == (sid & SEQ_MAX) % 1024
