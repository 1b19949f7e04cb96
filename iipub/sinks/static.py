"""Static-site sink: per edition an HTML page and its JSON; per product and language an index and an Atom feed.

Templating is stdlib `html.escape` / `xml.sax.saxutils`, not Jinja2: the pages are a few fixed shapes,
and one explicit escape per interpolation is easier to audit than autoescape rules that differ for .html and .atom.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import html
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from ..compose import Artifact, artifact_from_document, artifact_from_json
from ..config import NAME_PATTERN
from ..validate import is_public_http_url
from . import Delivered, DeliveryResult, Event, Parked, RetryLater

FEED_ENTRIES = 50
_PRODUCT_RE = re.compile(NAME_PATTERN)
_LANG_RE = re.compile(r"^[a-z]{2,3}(?:-[a-z0-9]{2,8})*$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RTL = frozenset({"ar", "fa", "he", "ur"})
# Characters that are invalid in XML 1.0 or can disguise text (bidi overrides). Validation
# already refuses them; the sink replaces them anyway so no event can break a page or feed.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_CSS = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:0 auto;padding:1rem;color:#222}"
    "h1{font-size:1.6rem}h2{font-size:1.15rem;margin-bottom:.25rem}"
    ".meta{color:#666}.text{white-space:pre-line}.sources{font-size:.9rem;padding-left:1.2rem}"
    "a{color:#0645ad}header a{color:inherit;text-decoration:none;font-weight:600}"
)


class StaticSink:
    """Writes under `root`; every file is replaced atomically and is a pure function of what
    is on disk, so delivering an event again (or out of order) yields byte-identical files."""

    name = "static"

    def __init__(self, root: Path, site_title: str = "InternationalIntelligence.org", base_url: str = "",
                 may_replace: Callable[[str], bool] | None = None) -> None:
        self.root = Path(root)
        self.site_title = site_title
        self.base_url = base_url.rstrip("/")
        # Whether an operator let this job's editions replace live pages (`iipub republish`).
        self.may_replace: Callable[[str], bool] = may_replace or (lambda job_id: False)

    def deliver(self, event: Event) -> DeliveryResult:
        problem = _check_parts(event.product, event.edition_date, event.lang)
        if problem:
            return Parked(f"static: {problem}")
        try:
            artifact = artifact_from_document(event.artifact)
        except ValueError as exc:
            return Parked(f"static: malformed artifact: {exc}")
        if (artifact.product, artifact.edition_date, artifact.lang) != (event.product, event.edition_date, event.lang):
            return Parked("static: artifact product/date/lang do not match the event")
        if artifact.sha256 != event.sha256:
            return Parked(f"static: artifact sha256 {artifact.sha256} does not match the event's {event.sha256}")
        try:
            live = self._live_sha256(artifact)
        except OSError as exc:
            return RetryLater(None, f"static: {exc}")
        if live is not None and live != artifact.sha256 and not self.may_replace(event.job_id):
            # Public truth: what readers already saw is not silently replaced (e.g. after a restore).
            return Parked(f"conflicting_republish: {artifact.product} {artifact.edition_date} {artifact.lang} is "
                          f"live with sha256 {live[:12]}…, this edition is {artifact.sha256[:12]}…; "
                          f"`iipub republish {event.job_id} --reason …` lets it replace the page")
        try:
            self._publish(artifact)
        except OSError as exc:
            return RetryLater(None, f"static: {exc}")
        return Delivered()

    def _live_sha256(self, art: Artifact) -> str | None:
        """The hash of the edition already published for this product, date and language."""
        path = self.root / art.product / art.edition_date / f"{art.lang}.json"
        try:
            return artifact_from_json(path.read_bytes()).sha256
        except (FileNotFoundError, NotADirectoryError):
            return None
        except ValueError:
            return "unreadable"  # something is there that we did not write: not ours to replace

    def _publish(self, art: Artifact) -> None:
        product_dir = self.root / art.product
        edition_dir = product_dir / art.edition_date
        lang_dir = product_dir / art.lang
        _ensure_dir(edition_dir)
        _ensure_dir(lang_dir)
        _atomic_write(edition_dir / f"{art.lang}.json", art.body)
        _atomic_write(edition_dir / f"{art.lang}.html", render_edition(art, self.site_title).encode("utf-8"))
        # Index and feed are rebuilt from the files on disk; the lock stops two relay workers
        # from writing an index that each built before seeing the other's edition.
        with _locked(lang_dir / ".lock"):
            editions = scan_editions(self.root, art.product, art.lang)
            _atomic_write(
                lang_dir / "index.html",
                render_index(editions, art.product, art.lang, self.site_title).encode("utf-8"),
            )
            _atomic_write(
                lang_dir / "feed.atom",
                render_feed(editions, art.product, art.lang, self.site_title, self.base_url).encode("utf-8"),
            )


def scan_editions(root: Path, product: str, lang: str) -> list[Artifact]:
    """Every readable edition of `product` in `lang` under `root`, newest first."""
    found: list[Artifact] = []
    product_dir = root / product
    for entry in sorted(product_dir.iterdir()):
        if not (_DATE_RE.match(entry.name) and entry.is_dir()):
            continue
        path = entry / f"{lang}.json"
        try:
            art = artifact_from_json(path.read_bytes())
        except FileNotFoundError:
            continue
        except ValueError:
            continue  # a foreign or damaged file must not take the whole index down
        if (art.product, art.edition_date, art.lang) == (product, entry.name, lang):
            found.append(art)
    found.sort(key=lambda a: a.edition_date, reverse=True)
    return found


# --- rendering ------------------------------------------------------------------------------


def _clean(text: str) -> str:
    return _UNSAFE.sub("\ufffd", text)


def _h(text: str) -> str:
    return html.escape(_clean(text), quote=True)


def _source_html(source: dict[str, str]) -> str:
    # Only http(s) links to public hosts become links; anything else is shown as inert text.
    if is_public_http_url(source["url"]):
        return f'<a href="{_h(source["url"])}" rel="noopener nofollow">{_h(source["title"])}</a>'
    return f'<span class="source">{_h(source["title"])}</span>'


def _items_html(art: Artifact) -> str:
    parts = []
    for item in art.items:
        sources = "".join(f"<li>{_source_html(s)}</li>" for s in item["sources"])
        parts.append(
            f'<li><h2>{_h(item["headline"])}</h2><p class="text">{_h(item["summary"])}</p>'
            f'<ul class="sources">{sources}</ul></li>'
        )
    return "\n".join(parts)


def _page(lang: str, title: str, feed_href: str, feed_title: str, body: str) -> str:
    direction = ' dir="rtl"' if lang.split("-")[0] in _RTL else ""
    return (
        "<!doctype html>\n"
        f'<html lang="{_h(lang)}"{direction}>\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        f"<title>{_h(title)}</title>\n"
        f'<link rel="alternate" type="application/atom+xml" title="{_h(feed_title)}" href="{_h(feed_href)}">\n'
        f"<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def render_edition(art: Artifact, site_title: str) -> str:
    """The HTML page at `<product>/<date>/<lang>.html`."""
    body = (
        f'<header><a href="../{_h(art.lang)}/index.html">{_h(site_title)}</a></header>\n<main><article>\n'
        f"<h1>{_h(art.title)}</h1>\n"
        f'<p class="meta"><time datetime="{_h(art.edition_date)}">{_h(art.edition_date)}</time>'
        f" · {_h(art.product)}</p>\n"
        f'<p class="text">{_h(art.summary)}</p>\n<ol>\n{_items_html(art)}\n</ol>\n</article></main>\n'
        f'<footer><a href="{_h(art.lang)}.json" type="application/json">JSON</a></footer>'
    )
    title = f"{art.title} — {art.product} — {art.edition_date}"
    return _page(art.lang, title, f"../{art.lang}/feed.atom", f"{art.product} ({art.lang})", body)


def render_index(editions: list[Artifact], product: str, lang: str, site_title: str) -> str:
    """The HTML page at `<product>/<lang>/index.html`, newest edition first."""
    rows = "\n".join(
        f'<li><a href="../{_h(a.edition_date)}/{_h(lang)}.html">'
        f'<time datetime="{_h(a.edition_date)}">{_h(a.edition_date)}</time></a> — {_h(a.title)}</li>'
        for a in editions
    )
    body = (
        f"<header>{_h(site_title)}</header>\n<main>\n<h1>{_h(product)} ({_h(lang)})</h1>\n"
        f'<p><a href="feed.atom" type="application/atom+xml">Atom feed</a></p>\n'
        f'<ol class="editions">\n{rows}\n</ol>\n</main>'
    )
    return _page(lang, f"{product} ({lang}) — {site_title}", "feed.atom", f"{product} ({lang})", body)


def _x(text: str) -> str:
    return xml_escape(_clean(text))


def _xa(text: str) -> str:
    return quoteattr(_clean(text))


def _updated(art: Artifact) -> str:
    # From the edition itself, never the wall clock: re-delivery must produce the same bytes.
    return f"{art.edition_date}T00:00:00Z"


def render_feed(editions: list[Artifact], product: str, lang: str, site_title: str, base_url: str = "") -> str:
    """The Atom 1.0 feed at `<product>/<lang>/feed.atom`, newest entry first."""
    prefix = f"{base_url}/{product}/{lang}/" if base_url else ""  # relative links resolve against the feed
    entries = []
    for art in editions[:FEED_ENTRIES]:
        href = (
            f"{base_url}/{product}/{art.edition_date}/{lang}.html" if base_url else f"../{art.edition_date}/{lang}.html"
        )
        content = f"<p>{_h(art.summary)}</p><ol>{_items_html(art)}</ol>"
        entries.append(
            "  <entry>\n"
            f"    <id>{_x(f'urn:iipub:{product}:{lang}:{art.edition_date}')}</id>\n"
            f"    <title>{_x(art.title)}</title>\n"
            f"    <updated>{_updated(art)}</updated>\n"
            f'    <link rel="alternate" type="text/html" href={_xa(href)}/>\n'
            f'    <summary type="text">{_x(art.summary)}</summary>\n'
            f'    <content type="html">{_x(content)}</content>\n'
            "  </entry>\n"
        )
    updated = _updated(editions[0]) if editions else "1970-01-01T00:00:00Z"
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<feed xmlns="http://www.w3.org/2005/Atom" xml:lang={_xa(lang)}>\n'
        f"  <id>{_x(f'urn:iipub:{product}:{lang}')}</id>\n"
        f"  <title>{_x(f'{product} ({lang}) — {site_title}')}</title>\n"
        f"  <updated>{updated}</updated>\n"
        f"  <author><name>{_x(site_title)}</name></author>\n"
        f'  <link rel="self" type="application/atom+xml" href={_xa(prefix + "feed.atom")}/>\n'
        f'  <link rel="alternate" type="text/html" href={_xa(prefix + "index.html")}/>\n'
        + "".join(entries)
        + "</feed>\n"
    )


# --- files ----------------------------------------------------------------------------------


def _check_parts(product: str, date: str, lang: str) -> str | None:
    """Refuse anything that could name a path outside `<root>/<product>/...`."""
    if not _PRODUCT_RE.match(product):
        return f"invalid product name {product[:80]!r}"
    if not _LANG_RE.match(lang):
        return f"invalid language {lang[:80]!r}"
    if not _DATE_RE.match(date):
        return f"invalid edition date {date[:80]!r}"
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        return f"invalid edition date {date!r}"
    return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ensure_dir(path: Path) -> None:
    """mkdir -p, making each new directory entry durable in its parent."""
    missing: list[Path] = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not d.is_dir():
                raise
        _fsync_dir(d.parent)


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never a mix."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        if path.read_bytes() == data:
            return  # already published: leave the file (and its mtime) alone
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a web server must be able to read it
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
