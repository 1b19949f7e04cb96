"""The static site's templates: escaping that is the standard library's for every string (the
bytes the pages had before templates), environments built once per process, Jinja2 imported only
when a page is rendered, and a template change that re-renders the whole site."""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iipub.edition.compose import Artifact, artifact_from_document
from iipub.publish.sinks import site, templating

# Any text, with the characters that matter here drawn often.
TEXT = st.text(st.one_of(st.sampled_from("<>&\"' \n\t\r\x00\x1b\x85\u202e\u2028\ufffe\ud800é🇪"), st.characters()))


@given(TEXT)
def test_html_autoescape_is_html_escape_of_the_cleaned_text(text: str) -> None:
    page = templating.html_templates().from_string('<p title="{{ v }}">{{ v }}</p>').render(v=text)
    expected = html.escape(templating.clean(text), quote=True)
    assert page == f'<p title="{expected}">{expected}</p>'


@given(TEXT)
def test_xml_autoescape_and_attributes_are_saxutils_of_the_cleaned_text(text: str) -> None:
    feed = templating.xml_templates().from_string("<a href={{ v|attribute }}>{{ v }}</a>").render(v=text)
    assert feed == f"<a href={quoteattr(templating.clean(text))}>{xml_escape(templating.clean(text))}</a>"


def test_escaped_html_is_printed_once_and_what_is_not_a_value_is_refused() -> None:
    env = templating.html_templates()
    fragment = site.items_html(_artifact(), "en")  # a macro's output: escaped HTML
    assert "&lt;h&gt;" in fragment and "javascript:" not in fragment and '<span class="source">T</span>' in fragment
    assert env.from_string("{{ f }}").render(f=fragment) == fragment  # printed as it is
    assert env.from_string("{{ f }}").render(f=str(fragment)).startswith("&lt;li&gt;")  # text: escaped
    with pytest.raises(TypeError, match="a template printed"):
        env.from_string("{{ month.count }}").render(month=site.MonthLink("2026-12", "December", "31"))
    with pytest.raises(Exception, match="undefined"):
        env.get_template("page.html").render()  # every name a template uses must be given


def test_the_environments_are_built_once_and_never_reload() -> None:
    env = templating.html_templates()
    assert env is templating.html_templates() and templating.xml_templates() is templating.xml_templates()
    assert env.auto_reload is False and env.autoescape is True and templating.xml_templates().autoescape is True
    assert env.get_template("edition.html") is env.get_template("edition.html")


def test_every_template_compiles() -> None:
    folder = Path(site.__file__).parent / "templates"
    names = sorted(p.name for p in folder.iterdir() if p.suffix in (".html", ".atom"))
    assert {"page.html", "series.html", "parts.html", "edition.html", "month.html", "product_index.html",
            "site_index.html", "feed.atom", "entry.atom", "withdrawn.html"} == set(names)
    for name in names:
        env = templating.xml_templates() if name.endswith(".atom") else templating.html_templates()
        env.get_template(name)


def test_a_template_change_changes_the_sites_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = site.Site().fingerprint()
    assert before == site.Site().fingerprint()
    monkeypatch.setattr(templating, "digest", lambda: "another set of templates")
    assert site.Site().fingerprint() != before


def test_the_digest_covers_every_template_file() -> None:
    import hashlib

    import jinja2

    folder = Path(site.__file__).parent / "templates"
    h = hashlib.sha256(f"jinja2 {jinja2.__version__}\n".encode())
    for path in sorted(folder.iterdir()):
        h.update(f"{path.name}\n".encode() + path.read_bytes())
    assert templating.digest() == h.hexdigest()


def test_jinja2_is_imported_by_the_first_page_not_by_the_relay() -> None:
    code = ("import sys, tempfile\n"
            "import iipub.publish.relay\n"
            "from iipub.publish.sinks.static import StaticSink\n"
            "StaticSink(tempfile.mkdtemp())\n"
            "print('before', 'jinja2' in sys.modules, 'markupsafe' in sys.modules)\n"
            "from iipub.publish.sinks.site import Site\n"
            "Site().site_index([])\n"
            "print('after', 'jinja2' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split("\n")[:2] == ["before False False", "after True"]


def _artifact() -> Artifact:
    items = [{"headline": "<h>", "summary": "s & t", "sources": [{"title": "T", "url": "javascript:alert(1)"}]}]
    return artifact_from_document({"product": "daily-brief", "edition_date": "2026-12-01", "lang": "en", "title": "t",
                                   "summary": "s", "items": items, "sources": items[0]["sources"]})
