"""The AOF manifest (node/aof.py): Redis 7's lines, plus the replication history on incr lines."""

from __future__ import annotations

import pytest

from node.aof import HistoryMark, LoadError, Manifest

A, B = "a" * 40, "0123456789abcdef" * 2 + "01234567"


def test_history_marks_round_trip_and_old_lines_still_parse() -> None:
    m = Manifest("appendonly.aof.3.base.xsnap", 3, [("appendonly.aof.3.incr.aof", 3),
                                                     ("appendonly.aof.4.incr.aof", 4)],
                 {"appendonly.aof.4.incr.aof": HistoryMark(1234, (B, A, 1000))})
    text = m.render().decode()
    assert "file appendonly.aof.3.incr.aof seq 3 type i\n" in text  # unmarked: Redis's shape
    assert (f"file appendonly.aof.4.incr.aof seq 4 type i startoffset 1234 replid {B} "
            f"replid2 {A} secondoffset 1000\n") in text
    back = Manifest.parse(text, "m")
    assert (back.base, back.base_seq, back.incrs, back.marks) == (m.base, 3, m.incrs, m.marks)
    zero = HistoryMark(0, (A, "0" * 40, -1))
    assert Manifest.parse(f"file x seq 1 type i{zero.render()}", "m").marks == {"x": zero}


@pytest.mark.parametrize("mark", [
    "startoffset 5", f"startoffset 5 replid {A} replid2 {A}",
    f"startoffset -1 replid {A} replid2 {A} secondoffset -1",
    f"startoffset 5 replid xyz replid2 {A} secondoffset -1",
    f"startoffset 5 replid {A.upper()} replid2 {A} secondoffset -1",
    f"startoffset 5 replid {A} replid2 {A} secondoffset abc",
])
def test_a_malformed_history_mark_refuses_the_manifest(mark: str) -> None:
    with pytest.raises(LoadError, match="Invalid AOF manifest file format: m line 2"):
        Manifest.parse(f"file b seq 1 type b\nfile i seq 1 type i {mark}\n", "m")


def test_a_rewrite_keeps_the_marks_of_the_incrs_it_keeps() -> None:
    marks = {"i1": HistoryMark(0, (A, A, 5)), "i2": HistoryMark(9, (B, A, 5))}
    m = Manifest("b1", 1, [("i1", 1), ("i2", 2)], marks).keep("b2", 2, 2)
    assert (m.base, m.incrs, m.marks) == ("b2", [("i2", 2)], {"i2": marks["i2"]})
