"""What the static sink keeps between deliveries: the least recently used entry goes first."""

from __future__ import annotations

from iipub.publish.sinks.lru import Lru


def test_the_least_recently_used_entry_is_dropped_when_full() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_a_value_put_again_is_replaced_and_pop_forgets_it() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("a", 5)
    assert cache.get("a") == 5
    cache.pop("a")
    cache.pop("never there")
    assert cache.get("a") is None
