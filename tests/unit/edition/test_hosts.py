"""Host names are compared as browsers resolve them (UTS #46, non-transitional), for output
URLs and allow-lists alike."""

from __future__ import annotations

import pytest

from iipub.edition.validate import ascii_host, url_problem


@pytest.mark.parametrize(("name", "expected"), [
    ("faß.de", "xn--fa-hia.de"),  # IDNA 2003 would map it to fass.de: another host
    ("FASS.DE", "fass.de"),
    ("Bücher.de.", "xn--bcher-kva.de"),
    ("ＥＸＡＭＰＬＥ.com", "example.com"),  # full-width letters map like a browser's
    ("", None),
    ("a..b", None),
])
def test_ascii_host(name: str, expected: str | None) -> None:
    assert ascii_host(name) == expected


def test_an_allow_list_of_fass_de_does_not_admit_fass_sharp_s() -> None:
    assert url_problem("https://faß.de/a", ("fass.de",)) == (
        "domain_not_allowed", "host 'xn--fa-hia.de' is not in fass.de")
    assert url_problem("https://fass.de/a", ("fass.de",)) is None
    assert url_problem("https://www.faß.de/a", ("faß.de",)) is None  # the list is normalised the same way
    assert url_problem("https://xn--fa-hia.de/a", ("faß.de",)) is None
