"""`with obj:` closes what it owns however the block ends."""

from __future__ import annotations

import pytest

from iipub.core.closing import Closing


class Owned(Closing):
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_the_block_gives_the_object_and_closes_it_once() -> None:
    owned = Owned()
    with owned as got:
        assert got is owned and owned.closed == 0
    assert owned.closed == 1


def test_an_error_in_the_block_still_closes_and_is_not_swallowed() -> None:
    owned = Owned()
    with pytest.raises(RuntimeError, match="boom"), owned:
        raise RuntimeError("boom")
    assert owned.closed == 1


def test_a_subclass_must_say_how_it_closes() -> None:
    with pytest.raises(NotImplementedError):
        Closing().close()
