from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from iipub.edition.compose import canonical_json, compose
from iipub.publish.sinks import EditionEvent, Parked, Published, RetryLater, Sink
from iipub.publish.sinks.static import StaticSink
from iipub.settings.config import Product
from iipub.settings.edition_schema import output_model

PRODUCT = Product(name="daily-brief", languages=("en", "es"), items=2, prompt="p")
ATOM = "{http://www.w3.org/2005/Atom}"


def payload(tag: str = "") -> dict[str, Any]:
    return {
        lang: {
            "title": f"{tag}Brief {lang}",
            "summary": f"Summary {lang}",
            "items": [
                {
                    "headline": f"Headline {i} {lang}",
                    "summary": f"Item summary {i} {lang}",
                    "sources": [{"title": f"Source {i}", "url": f"https://www.reuters.com/{lang}/{i}"}],
                }
                for i in range(2)
            ],
        }
        for lang in ("en", "es")
    }


def events(day: dt.date, doc: dict[str, Any] | None = None) -> dict[str, EditionEvent]:
    edition = output_model(PRODUCT.languages, PRODUCT.items).model_validate(doc or payload())
    out = {}
    for lang, art in compose(edition, PRODUCT, day).items():
        out[lang] = EditionEvent(
            event_id=f"evt-{day}-{lang}",
            job_id="job-1",
            product=PRODUCT.name,
            edition_date=art.edition_date,
            lang=lang,
            sha256=art.sha256,
            artifact=json.loads(art.body),
            published_at=f"{day}T06:00:00Z",
        )
    return out


def snapshot(root: Path) -> dict[str, tuple[bytes, str]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


DAY1 = dt.date(2025, 3, 6)
DAY2 = dt.date(2025, 3, 7)


def test_static_sink_satisfies_the_protocol(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path)
    assert isinstance(sink, Sink)
    assert sink.name == "static"


def test_delivery_writes_edition_index_and_feed(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path)
    evs = events(DAY1)
    assert sink.publish(evs["en"]) == Published()
    base = tmp_path / "daily-brief"
    page = (base / "2025-03-06" / "en.html").read_text("utf-8")
    assert '<html lang="en">' in page
    assert '<meta charset="utf-8">' in page
    assert "<title>Brief en — Daily Brief — 6 March 2025 — InternationalIntelligence.org</title>" in page
    assert '<a href="https://www.reuters.com/en/1" rel="noopener nofollow">Source 1</a>' in page
    assert (base / "2025-03-06" / "en.json").read_bytes() == json.dumps(
        evs["en"].artifact, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    index = (base / "en" / "index.html").read_text("utf-8")
    assert 'rel="alternate" type="application/atom+xml"' in index and 'href="feed.atom"' in index
    assert '<a href="../2025-03-06/en.html">' in index
    feed = ET.fromstring((base / "en" / "feed.atom").read_bytes())
    assert feed.tag == f"{ATOM}feed"
    assert [e.findtext(f"{ATOM}title") for e in feed.iter(f"{ATOM}entry")] == ["Brief en"]
    # Spanish is not published until its own event arrives.
    assert not (base / "2025-03-06" / "es.html").exists()
    assert sink.publish(evs["es"]) == Published()
    assert '<html lang="es">' in (base / "2025-03-06" / "es.html").read_text("utf-8")
    assert "Brief es" in (base / "es" / "index.html").read_text("utf-8")
    assert "Brief es" not in (base / "en" / "index.html").read_text("utf-8")


def test_redelivery_is_byte_identical(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path, base_url="https://ii.org/")
    for ev in [*events(DAY1).values(), *events(DAY2).values()]:
        assert sink.publish(ev) == Published()
    before = snapshot(tmp_path)
    assert len(before) >= 12
    # Again, in a different order and through a fresh sink instance: nothing changes.
    again = StaticSink(tmp_path, base_url="https://ii.org/")
    for ev in [*events(DAY2).values(), *events(DAY1).values()]:
        assert again.publish(ev) == Published()
    assert snapshot(tmp_path) == before


def test_second_edition_is_listed_newest_first(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path, base_url="https://ii.org")
    # Deliver the newer edition first: the order of delivery must not matter.
    assert sink.publish(events(DAY2, payload("New "))["en"]) == Published()
    assert sink.publish(events(DAY1, payload("Old "))["en"]) == Published()
    index = (tmp_path / "daily-brief" / "en" / "index.html").read_text("utf-8")
    assert index.index("2025-03-07") < index.index("2025-03-06")
    assert index.index("New Brief en") < index.index("Old Brief en")

    feed = ET.fromstring((tmp_path / "daily-brief" / "en" / "feed.atom").read_bytes())
    entries = list(feed.iter(f"{ATOM}entry"))
    assert [e.findtext(f"{ATOM}title") for e in entries] == ["New Brief en", "Old Brief en"]
    # Each entry's `updated` is its publication time (the event's), never the time of rendering.
    updated = [e.findtext(f"{ATOM}updated") for e in entries]
    # publication times, each with its edition date as the fractional second (distinct within a second)
    assert updated == [f"2025-03-07T06:00:00.{DAY2.toordinal():06d}Z", f"2025-03-06T06:00:00.{DAY1.toordinal():06d}Z"]
    assert feed.findtext(f"{ATOM}updated") == "2025-03-07T06:00:00Z"
    assert feed.findtext(f"{ATOM}id") and all(e.findtext(f"{ATOM}id") for e in entries)
    links = [e.find(f"{ATOM}link").get("href") for e in entries]  # type: ignore[union-attr]
    assert links == ["https://ii.org/daily-brief/2025-03-07/en.html", "https://ii.org/daily-brief/2025-03-06/en.html"]
    assert len({e.findtext(f"{ATOM}id") for e in entries}) == 2


def test_provider_text_is_escaped_and_unsafe_links_dropped(tmp_path: Path) -> None:
    doc = payload()
    doc["en"]["title"] = "<script>alert('t')</script>"
    doc["en"]["items"][0]["headline"] = '<img src=x onerror="alert(1)"> & co'
    doc["en"]["items"][0]["sources"][0] = {"title": "click <b>me</b>", "url": "javascript:alert(1)"}
    doc["en"]["items"][1]["sources"][0] = {"title": "local", "url": "http://127.0.0.1/admin"}
    # The sink does not trust that validation ran: it escapes and filters on its own.
    assert StaticSink(tmp_path).publish(events(DAY1, doc)["en"]) == Published()
    page = (tmp_path / "daily-brief" / "2025-03-06" / "en.html").read_text("utf-8")
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;t&#x27;)&lt;/script&gt;" in page
    assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; co" in page
    assert "javascript:" not in page
    assert "127.0.0.1" not in page
    assert "click &lt;b&gt;me&lt;/b&gt;" in page  # the title is still shown, as text
    index = (tmp_path / "daily-brief" / "en" / "index.html").read_text("utf-8")
    assert "<script>" not in index and "&lt;script&gt;" in index
    feed_bytes = (tmp_path / "daily-brief" / "en" / "feed.atom").read_bytes()
    feed = ET.fromstring(feed_bytes)  # still well-formed XML
    entry = feed.find(f"{ATOM}entry")
    assert entry is not None
    assert entry.findtext(f"{ATOM}title") == "<script>alert('t')</script>"  # text, once decoded
    assert b"javascript:" not in feed_bytes


def test_control_characters_cannot_break_the_feed(tmp_path: Path) -> None:
    doc = payload()
    doc["en"]["summary"] = "nul\x00 bell\x07 rlo\u202e end"
    assert StaticSink(tmp_path).publish(events(DAY1, doc)["en"]) == Published()
    feed = ET.fromstring((tmp_path / "daily-brief" / "en" / "feed.atom").read_bytes())
    summary = feed.find(f"{ATOM}entry/{ATOM}summary")
    assert summary is not None and summary.text == "nul\ufffd bell\ufffd rlo\ufffd end"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("product", "../escape"),
        ("product", "daily-brief/../../x"),
        ("lang", "../../etc"),
        ("lang", "en/x"),
        ("edition_date", "../2025-03-06"),
        ("edition_date", "2025-13-45"),
    ],
)
def test_path_traversal_is_refused(tmp_path: Path, field: str, value: str) -> None:
    root = tmp_path / "site"
    ev = events(DAY1)["en"]
    payload_ = ev.to_payload() | {field: value}
    payload_["artifact"] = dict(payload_["artifact"]) | {field: value}
    # A consistent hash, so only the path check can stop it.
    payload_["sha256"] = hashlib.sha256(canonical_json(payload_["artifact"])).hexdigest()
    result = StaticSink(root).publish(EditionEvent.from_payload(payload_))
    assert isinstance(result, Parked)
    assert not tmp_path.joinpath("escape").exists()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_artifact_not_matching_its_hash_is_parked(tmp_path: Path) -> None:
    ev = events(DAY1)["en"]
    tampered = EditionEvent.from_payload(ev.to_payload() | {"artifact": (ev.artifact or {}) | {"title": "forged"}})
    result = StaticSink(tmp_path).publish(tampered)
    assert isinstance(result, Parked) and "sha256" in result.why
    assert list(tmp_path.iterdir()) == []


def test_unwritable_root_is_retried_and_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "site"
    root.write_bytes(b"not a directory")  # tests run as root, so chmod cannot stop writes
    result = StaticSink(root).publish(events(DAY1)["en"])
    assert isinstance(result, RetryLater)
    assert result.delay is None and "static:" in result.why
    assert root.read_bytes() == b"not a directory"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["site"]


def test_failure_mid_publication_leaves_no_temp_files(tmp_path: Path) -> None:
    sink = StaticSink(tmp_path)
    assert sink.publish(events(DAY1)["en"]) == Published()
    before = snapshot(tmp_path)
    # The index path is occupied by a directory: replacing it fails after the edition files.
    (tmp_path / "daily-brief" / "en" / "index.html").unlink()
    (tmp_path / "daily-brief" / "en" / "index.html").mkdir()
    result = sink.publish(events(DAY2)["en"])
    assert isinstance(result, RetryLater)
    assert not list(tmp_path.rglob("*.tmp"))
    # The feed of the earlier edition is untouched: no half-written state.
    assert (tmp_path / "daily-brief" / "en" / "feed.atom").read_bytes() == before["daily-brief/en/feed.atom"][0]
    # Once the obstacle is gone, the retry completes the publication.
    (tmp_path / "daily-brief" / "en" / "index.html").rmdir()
    assert sink.publish(events(DAY2)["en"]) == Published()
    assert "2025-03-07" in (tmp_path / "daily-brief" / "en" / "index.html").read_text("utf-8")


# -- revisions: corrections and withdrawals ---------------------------------------------------


def revised(ev: EditionEvent, revision: int, kind: str, other: EditionEvent | None = None) -> EditionEvent:
    """`ev`'s edition at `revision`: withdrawn, or corrected to `other`'s content."""
    if kind == "edition.withdrawn":
        return dataclasses.replace(ev, event_id=f"{ev.event_id}-r{revision}", artifact=None, type=kind,
                                   revision=revision, changed_at=f"{ev.edition_date}T09:00:00Z")
    assert other is not None
    return dataclasses.replace(ev, event_id=f"{ev.event_id}-r{revision}", artifact=other.artifact, sha256=other.sha256,
                               type=kind, revision=revision, supersedes=ev.sha256,
                               changed_at=f"{ev.edition_date}T09:00:00Z")


def test_a_late_revision_1_after_revision_2_leaves_every_file_at_revision_2(tmp_path: Path) -> None:
    first, fixed = events(DAY1)["en"], events(DAY1, payload("Fixed "))["en"]
    sink = StaticSink(tmp_path)
    assert sink.publish(first) == Published()
    assert sink.publish(revised(first, 2, "edition.corrected", fixed)) == Published()
    at_2 = snapshot(tmp_path)
    assert json.loads((tmp_path / "daily-brief" / str(DAY1) / "en.json").read_bytes())["title"] == "Fixed Brief en"
    assert sink.publish(first) == Published()  # acknowledged (the consumer holds a newer one), nothing written
    assert snapshot(tmp_path) == at_2
    assert StaticSink(tmp_path, may_replace=lambda job: True).publish(first) == Published()  # a republish grant too
    assert snapshot(tmp_path) == at_2


def test_the_same_revision_with_other_content_is_parked_not_written(tmp_path: Path) -> None:
    first, fixed = events(DAY1)["en"], events(DAY1, payload("Fixed "))["en"]
    sink = StaticSink(tmp_path)
    assert sink.publish(first) == Published()
    assert sink.publish(revised(first, 2, "edition.corrected", fixed)) == Published()
    before = snapshot(tmp_path)
    other = events(DAY1, payload("Other "))["en"]
    result = sink.publish(revised(first, 2, "edition.corrected", other))
    assert isinstance(result, Parked) and "revision 2" in result.why
    withdrawn_too = sink.publish(revised(first, 2, "edition.withdrawn"))
    assert isinstance(withdrawn_too, Parked) and "not withdrawn" in withdrawn_too.why
    assert snapshot(tmp_path) == before
