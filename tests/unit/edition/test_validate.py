from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from iipub.edition.validate import MAX_REASONS, Validation, is_public_http_url, url_problem, validate
from iipub.settings.config import Product

PRODUCT = Product(name="daily-brief", languages=("en", "es"), items=3, prompt="p")


def payload(product: Product = PRODUCT) -> dict[str, Any]:
    """A valid payload: every language present, distinct texts, public source URLs."""
    out: dict[str, Any] = {}
    for lang in product.languages:
        out[lang] = {
            "title": f"Daily brief {lang} title",
            "summary": f"The world today, summary in {lang}.",
            "items": [
                {
                    "headline": f"Headline {i} ({lang})",
                    "summary": f"Item {i} summary written in {lang}.\nSecond line\twith a tab.",
                    "sources": [{"title": "Reuters", "url": f"https://www.reuters.com/world/story-{i}"}],
                }
                for i in range(product.items)
            ],
        }
    return out


def run(mutate: Callable[[dict[str, Any]], Any] | None = None, product: Product = PRODUCT) -> Validation:
    doc = payload(product)
    if mutate:
        mutate(doc)
    return validate(json.dumps(doc), product)


def set_url(url: str) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        doc["en"]["items"][1]["sources"][0]["url"] = url

    return mutate


def test_good_payload_passes() -> None:
    v = run()
    assert v.ok, v.reasons
    assert v.reasons == ()
    assert v.edition is not None
    assert v.edition.en.items[2].headline == "Headline 2 (en)"  # type: ignore[attr-defined]
    assert v.edition.es.title == "Daily brief es title"  # type: ignore[attr-defined]


def test_good_payload_with_non_ascii_text_and_idn_host_passes() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["es"]["title"] = "Resumen diario: año nuevo, señales — «España»"
        doc["es"]["items"][0]["sources"][0]["url"] = "https://www.münchen.de/nachrichten"

    v = run(mutate)
    assert v.ok, v.reasons


def _raw(text: str) -> Validation:
    return validate(text, PRODUCT)


GOOD_TEXT = json.dumps(payload())


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        pytest.param(None, "empty_output", id="none"),
        pytest.param("", "empty_output", id="empty"),
        pytest.param("  \n ", "empty_output", id="blank"),
        pytest.param("{not json", "not_json:", id="malformed"),
        pytest.param(GOOD_TEXT[: len(GOOD_TEXT) // 2], "not_json:", id="truncated"),
        pytest.param(GOOD_TEXT.replace("Reuters", "Reu\x00ters", 1), "not_json:", id="raw-nul"),
        pytest.param(GOOD_TEXT.replace("Reuters", "Reu\ud800ters", 1), "not_utf8:", id="lone-surrogate"),
        pytest.param("[" * 100_000 + "]" * 100_000, "not_json:", id="deeply-nested"),
        pytest.param('{"en": 1, "en": 2}', "duplicate_key:", id="duplicate-key"),
        pytest.param("[1, 2]", "schema: (root):", id="not-an-object"),
    ],
)
def test_unparseable_input_fails(text: str | None, prefix: str) -> None:
    v = _raw(text)  # type: ignore[arg-type]
    assert not v.ok
    assert v.edition is None
    assert v.reasons[0].startswith(prefix), v.reasons


def test_oversized_is_refused_before_parsing() -> None:
    small = Product(name="daily-brief", items=3, prompt="p", max_output_bytes=1000)
    text = "{" + "x" * 2000  # not JSON either: the size check must come first
    v = validate(text, small)
    assert v.reasons == ("too_large: 2001 bytes > 1000",)


def test_size_is_counted_in_utf8_bytes() -> None:
    doc_text = json.dumps(payload(), ensure_ascii=False)
    limit = len(doc_text.encode()) - 1
    text = doc_text.replace("Reuters", "Reutérs")  # each é is 2 bytes
    v = validate(text, Product(name="daily-brief", items=3, prompt="p", max_output_bytes=limit))
    assert not v.ok and v.reasons[0].startswith("too_large:")
    assert validate(doc_text, Product(name="daily-brief", items=3, prompt="p", max_output_bytes=limit + 1)).ok


def _del(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        del doc[path]

    return mutate


CASES: list[Any] = [
    pytest.param(_del("es"), "schema: es: Field required", id="missing-language"),
    pytest.param(lambda d: d.update(fr=copy.deepcopy(d["en"])), "schema: fr: Extra inputs", id="unknown-language"),
    pytest.param(lambda d: d["es"]["items"].pop(), "schema: es.items: List should have at least 3 items", id="too-few"),
    pytest.param(
        lambda d: d["en"]["items"].append(copy.deepcopy(d["en"]["items"][0])),
        "schema: en.items: List should have at most 3 items",
        id="too-many",
    ),
    pytest.param(
        lambda d: d["en"]["items"][0].update(image="x"), "schema: en.items[0].image: Extra inputs", id="extra-key"
    ),
    pytest.param(lambda d: d["en"].update(title=""), "schema: en.title:", id="empty-title"),
    pytest.param(lambda d: d["en"].update(title=7), "schema: en.title:", id="title-not-string"),
    pytest.param(lambda d: d["en"]["items"][0].update(sources=[]), "schema: en.items[0].sources:", id="no-sources"),
    pytest.param(
        set_url("javascript:alert(1)"), "bad_url: en.items[1].sources[0]: scheme 'javascript'", id="javascript"
    ),
    pytest.param(
        set_url("data:text/html,<script>x</script>"), "bad_url: en.items[1].sources[0]: scheme 'data'", id="data"
    ),
    pytest.param(set_url("ftp://ftp.reuters.com/x"), "bad_url:", id="ftp"),
    pytest.param(set_url("//www.reuters.com/x"), "bad_url:", id="scheme-relative"),
    pytest.param(
        set_url("http://localhost/admin"),
        "bad_url: en.items[1].sources[0]: host 'localhost' is not public",
        id="localhost",
    ),
    pytest.param(set_url("http://api.localhost/"), "bad_url:", id="dot-localhost"),
    pytest.param(set_url("http://printer.local/"), "bad_url:", id="mdns"),
    pytest.param(set_url("http://db.internal/"), "bad_url:", id="internal"),
    pytest.param(set_url("http://a.onion/"), "bad_url:", id="onion"),
    pytest.param(
        set_url("http://127.0.0.1/"), "bad_url: en.items[1].sources[0]: host '127.0.0.1' is an IP address", id="ipv4"
    ),
    pytest.param(set_url("http://[::1]/"), "bad_url: en.items[1].sources[0]: host '[::1]' is an IP address", id="ipv6"),
    pytest.param(
        set_url("http://2130706433/"), "bad_url: en.items[1].sources[0]: host '2130706433' is an IP", id="decimal-ip"
    ),
    pytest.param(set_url("http://0x7f000001/"), "bad_url:", id="hex-ip"),
    pytest.param(set_url("http://127.1/"), "bad_url:", id="short-ip"),
    pytest.param(set_url("http://0177.0.0.1/"), "bad_url:", id="octal-ip"),
    pytest.param(
        set_url("https://example.com/a"), "bad_url: en.items[1].sources[0]: host 'example.com'", id="example-com"
    ),
    pytest.param(set_url("https://foo.example.org/a"), "bad_url:", id="sub-example-org"),
    pytest.param(set_url("https://example.co.uk/a"), "bad_url:", id="example-cctld"),
    pytest.param(
        set_url("http://intranet/"), "bad_url: en.items[1].sources[0]: host 'intranet' is not public", id="no-dot"
    ),
    pytest.param(
        set_url("https://user:pw@www.reuters.com/"), "bad_url: en.items[1].sources[0]: userinfo", id="userinfo"
    ),
    pytest.param(set_url("https://www.reuters.com@evil.com/"), "bad_url:", id="userinfo-lookalike"),
    pytest.param(set_url("https://evil.com\\@www.reuters.com/"), "bad_url:", id="backslash"),
    pytest.param(set_url("https://www.reu ters.com/"), "bad_url:", id="space"),
    pytest.param(set_url("https://bad_label.com/"), "bad_url:", id="bad-label"),
    pytest.param(set_url("https://www.reuters.com:99999/"), "bad_url:", id="bad-port"),
    pytest.param(
        lambda d: d["es"]["items"][2].update(headline="Bad\x07bell"),
        "control_chars: es.items[2].headline (U+0007)",
        id="bell",
    ),
    pytest.param(lambda d: d["en"].update(summary="Line\r\nbreak"), "control_chars: en.summary", id="carriage-return"),
    pytest.param(lambda d: d["en"].update(title="x\x7fy"), "control_chars: en.title (U+007F)", id="del"),
    pytest.param(lambda d: d["en"].update(title="x\x85y"), "control_chars: en.title (U+0085)", id="c1"),
    pytest.param(lambda d: d["en"].update(title="x\u0000y"), "control_chars: en.title (U+0000)", id="escaped-nul"),
    pytest.param(
        lambda d: d["en"]["items"][0]["sources"][0].update(title="Reuters\u202egnp.exe"),
        "control_chars: en.items[0].sources[0].title (U+202E)",
        id="bidi-override",
    ),
    pytest.param(lambda d: d["es"].update(summary="a\u2066b"), "control_chars: es.summary (U+2066)", id="bidi-isolate"),
    pytest.param(
        lambda d: d["es"].update(title="a\ud83db"), "control_chars: es.title (U+D83D)", id="escaped-surrogate"
    ),
    pytest.param(
        lambda d: d["es"].update(title=d["en"]["title"]), "same_text: en and es titles are identical", id="same-title"
    ),
    pytest.param(
        lambda d: d["es"].update(summary="  " + d["en"]["summary"].upper() + " "),
        "same_text: en and es summaries are identical",
        id="same-summary-normalised",
    ),
    pytest.param(
        lambda d: d["es"]["items"][1].update(headline=d["en"]["items"][0]["headline"]),
        "same_text: en.items[0].headline and es.items[1].headline are identical",
        id="same-headline",
    ),
    pytest.param(
        lambda d: d["es"]["items"][2].update(summary=d["en"]["items"][2]["summary"]),
        "same_text: en.items[2].summary and es.items[2].summary are identical",
        id="same-item-summary",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), CASES)
def test_bad_payload_fails_with_reason(mutate: Callable[[dict[str, Any]], Any], expected: str) -> None:
    v = run(mutate)
    assert not v.ok
    assert v.edition is None
    assert any(r.startswith(expected) for r in v.reasons), v.reasons


def test_allowed_domains_restrict_hosts() -> None:
    product = Product(name="daily-brief", items=3, prompt="p", allowed_domains=("reuters.com", "apnews.com"))
    assert run(product=product).ok  # www.reuters.com: a subdomain of an allowed domain
    assert run(set_url("https://reuters.com/x"), product=product).ok
    v = run(set_url("https://www.bbc.co.uk/news"), product=product)
    assert not v.ok
    assert v.reasons == (
        "domain_not_allowed: en.items[1].sources[0]: host 'www.bbc.co.uk' is not in reuters.com, apnews.com",
    )
    # A name that merely ends with an allowed domain's text is not a subdomain of it.
    assert run(set_url("https://evilreuters.com/x"), product=product).reasons[0].startswith("domain_not_allowed:")
    # A private host is refused as such even under an allow-list.
    assert run(set_url("http://localhost/"), product=product).reasons[0].startswith("bad_url:")


def test_all_reasons_are_collected() -> None:
    def mutate(doc: dict[str, Any]) -> None:
        doc["en"]["items"][0]["sources"][0]["url"] = "http://localhost/"
        doc["es"]["items"][1]["sources"][0]["url"] = "javascript:alert(1)"
        doc["es"]["title"] = doc["en"]["title"]
        doc["en"]["summary"] = "bad\x01"
        doc["es"]["items"].pop()  # a schema failure does not hide the others

    v = run(mutate)
    kinds = {r.split(":")[0] for r in v.reasons}
    assert kinds == {"schema", "bad_url", "same_text", "control_chars"}, v.reasons
    assert len(v.reasons) == 5


def test_reasons_are_capped() -> None:
    product = Product(name="daily-brief", items=100, prompt="p")

    def mutate(doc: dict[str, Any]) -> None:
        for item in doc["en"]["items"]:
            item["sources"][0]["url"] = "http://localhost/"

    v = run(mutate, product=product)
    assert not v.ok
    assert len(v.reasons) == MAX_REASONS
    assert v.reasons[-1] == f"truncated: {100 - (MAX_REASONS - 1)} more reasons"


def test_validation_is_deterministic() -> None:
    text = json.dumps(payload()).replace("https://www.reuters.com/world/story-1", "http://10.0.0.1/")
    assert validate(text, PRODUCT) == validate(text, PRODUCT)


@pytest.mark.parametrize(
    ("url", "public"),
    [
        ("https://www.reuters.com/world", True),
        ("HTTP://WWW.BBC.CO.UK/news?x=1#y", True),
        ("https://news.example-site.org/", True),
        ("https://www.reuters.com./world", True),
        ("https://localhost./", False),
        ("https://ｌｏｃａｌｈｏｓｔ/", False),
        ("https://%6cocalhost/", False),
        ("https://[2001:db8::1]/", False),
        ("https://192.168.1.1.nip.io.123/", False),
        ("vbscript:msgbox", False),
        ("https:///path-only", False),
        ("https://" + "a" * 64 + ".com/", False),
    ],
)
def test_url_check(url: str, public: bool) -> None:
    assert is_public_http_url(url) is public, url_problem(url)
