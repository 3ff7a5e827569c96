"""The meter the 512 MiB tests rely on really sees a body held in memory (else those tests prove nothing)."""

from __future__ import annotations

import pytest

from tests.support.memory import MIB, PeakRss, hwm_reset_works

METHODS = ["hwm", "sampling"] if hwm_reset_works() else ["sampling"]


@pytest.mark.parametrize("method", METHODS)
def test_meter_sees_a_buffered_body_and_not_a_streamed_one(method: str) -> None:
    block = bytes(MIB)
    with PeakRss(method) as buffered:
        kept = [block[:-1] + bytes([i % 256]) for i in range(256)]  # 256 MiB held at once
        del kept
    with PeakRss(method) as streamed:
        for i in range(256):
            piece = block[:-1] + bytes([i % 256])
            del piece
    assert buffered.method == method
    assert buffered.growth > 200 * MIB
    assert streamed.growth < 32 * MIB
