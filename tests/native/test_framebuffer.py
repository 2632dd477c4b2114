"""FrameBuffer: a request frame's buffer whose memory follows the bytes received, and
whose reuse is decided by counting exports."""

from __future__ import annotations

import os

import pytest

from pybroker._native.framebuffer import FrameBuffer


def test_a_declared_length_maps_nothing():
    frame = FrameBuffer(1 << 40)  # a terabyte: only ever a number
    assert len(frame) == 1 << 40 and frame.capacity == 0 and frame.exports == 0
    with memoryview(frame) as view:
        assert len(view) == 0


def test_ensure_grows_by_pages_and_keeps_the_bytes():
    frame = FrameBuffer(5_000_000)
    frame.ensure(1)
    assert frame.capacity == os.sysconf("SC_PAGESIZE")
    data = os.urandom(4000)
    with memoryview(frame) as view:
        view[:4000] = data
    for n in (100_000, 1_000_000, 5_000_000):
        frame.ensure(n)
        assert frame.capacity >= n
        with memoryview(frame) as view:
            assert bytes(view[:4000]) == data
    with memoryview(frame) as view:
        assert len(view) == 5_000_000  # all of it mapped: views see the whole frame
    frame.ensure(10)  # never shrinks
    assert frame.capacity >= 5_000_000


def test_exports_are_counted_and_block_growth_and_length_changes():
    frame = FrameBuffer(1 << 20)
    frame.ensure(4096)
    view = memoryview(frame)
    part = view[10:20]
    assert frame.exports == 1  # a slice shares its base's export
    with pytest.raises(BufferError):
        frame.ensure(1 << 20)
    with pytest.raises(BufferError):
        frame.length = 10
    part.release()
    view.release()
    assert frame.exports == 0
    frame.ensure(1 << 20)
    frame.length = 100
    assert len(frame) == 100 and len(memoryview(frame)) == 100


def test_bad_arguments():
    with pytest.raises(ValueError):
        FrameBuffer(-1)
    frame = FrameBuffer(10)
    with pytest.raises(ValueError):
        frame.ensure(11)
    with pytest.raises(ValueError):
        frame.length = -5


def test_discarded_pages_read_as_zeros_and_the_kept_ones_stay():
    frame = FrameBuffer(3 * 4096)
    frame.ensure(3 * 4096)
    with memoryview(frame) as view:
        view[:] = b"\xab" * len(view)
    frame.discard_beyond(4096)
    with memoryview(frame) as view:
        assert bytes(view[:4096]) == b"\xab" * 4096
        assert bytes(view[4096:]) == bytes(2 * 4096)
