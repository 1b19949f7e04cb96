"""A base for objects that own something to release (an HTTP client, a provider) in `close()`."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """`with obj:` gives `obj` and calls `obj.close()` when the block ends, however it ends."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
