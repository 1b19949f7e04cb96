"""Static-site sink: per edition an HTML page and its JSON; per product and language an index,
a page per month and an Atom feed; a site index (the pages: `site`).

A delivery costs the same whatever the size of the archive: a small manifest outside the public
tree (`manifest`) says what is published, and only the pages the new edition changes are
rendered again: the edition, its previous and next editions (their links), its month and the
neighbouring months, the product's index, its feed when the edition is among the latest, the
site index, and the other languages' pages of the same date, month and product until they link
to it (their alternates). Every page is a pure function of the manifest and the editions, so
delivering an event again (or out of order) yields byte-identical files, and a file whose bytes
would not change is not written at all.

The sink's state (manifest, lock, temporary files) lives in its state directory, by default
`<root's parent>/.iipub-state/<root's name>`, never under the public root.

The pages and feeds are Jinja2 templates with autoescaping (`site`, `templating`, `templates/`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import structlog

from iipub.core.files import fsync_dir, replace_atomically
from iipub.core.timefmt import iso_z
from iipub.edition.compose import DATE_RE, Artifact, artifact_from_document, artifact_from_json
from iipub.edition.paths import edition_path, feed_path, index_path, json_path, month_path
from iipub.model.states import EventType
from iipub.publish.sinks import EditionEvent, Parked, Published, PublishResult, RetryLater
from iipub.publish.sinks.lru import Lru
from iipub.publish.sinks.manifest import FileCache, Manifest, ManifestError
from iipub.publish.sinks.site import (
    FEED_ENTRIES,
    INDEX_ENTRIES,
    LANG_RE,
    SITE_INDEX,
    Entry,
    Site,
    Withdrawal,
    correction_in_page,
    midnight,
    published_in_page,
    withdrawal_from_json,
    withdrawn_json,
)
from iipub.settings.config import NAME_RE, Product, default_state_dir

__all__ = ["StaticSink"]

# Temporary files of `_Files.write` (mkstemp: `.<name>.<8 random>.tmp`).
_TMP_RE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
log = structlog.get_logger("iipub.static")
_ARTIFACT_CACHE = 512  # parsed artifacts kept between deliveries of one sink (a feed needs 50 per series)


class StaticSink:
    """Writes under `root`, keeps its manifest, lock and temporary files in `state_dir`."""

    name = "static"

    def __init__(self, root: Path, site_title: str = "InternationalIntelligence.org", base_url: str = "",
                 may_replace: Callable[[str], bool] | None = None, *,
                 products: Mapping[str, Product] | None = None, state_dir: Path | None = None) -> None:
        self.root = Path(root)
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir(self.root)
        self.site = Site(site_title, base_url, products)
        # Whether an operator let this job's editions replace live pages (`iipub republish`).
        self.may_replace: Callable[[str], bool] = may_replace or (lambda job_id: False)
        self._artifacts: Lru[tuple[str, str, str], Artifact] = Lru(_ARTIFACT_CACHE)
        self._fingerprint: str | None = None
        self._cache = FileCache()  # the manifest's files as parsed, while they stay the same

    def publish(self, event: EditionEvent) -> PublishResult:
        problem = _check_parts(event.product, event.edition_date, event.lang)
        if problem:
            return Parked(f"static: {problem}")
        artifact: Artifact | None = None
        if event.type != EventType.WITHDRAWN:
            try:
                artifact = artifact_from_document(event.artifact)
            except ValueError as exc:
                return Parked(f"static: malformed artifact: {exc}")
            if (artifact.product, artifact.edition_date, artifact.lang) != (
                    event.product, event.edition_date, event.lang):
                return Parked("static: artifact product/date/lang do not match the event")
            if artifact.sha256 != event.sha256:
                return Parked(f"static: artifact sha256 {artifact.sha256} does not match the event's {event.sha256}")
        elif not _SHA_RE.fullmatch(event.sha256):
            return Parked(f"static: withdrawn sha256 {event.sha256[:80]!r} is not a sha256")
        published = _utc_stamp(event.published_at)
        if published is None:
            return Parked(f"static: published_at {event.published_at[:40]!r} is not an ISO 8601 time")
        changed = _utc_stamp(event.changed_at) if event.changed_at is not None else published
        if changed is None:
            return Parked(f"static: changed_at {str(event.changed_at)[:40]!r} is not an ISO 8601 time")
        try:
            # The root first: one that cannot be a directory fails before the state directory exists.
            _ensure_dir(self.root)
            files = self._files()
            with _locked(self.state_dir / "lock"):
                _remove_leftovers(self.state_dir / "tmp", quiet=True)
                try:
                    parked = self._apply(files, self._manifest(files), event, artifact, published, changed)
                except ManifestError:
                    # A damaged shard: the manifest is made again from the public tree.
                    parked = self._apply(files, self._rebuild(files), event, artifact, published, changed)
                if parked is not None:
                    return parked
                files.sync()
        except (OSError, ManifestError) as exc:
            return RetryLater(None, f"static: {exc}")
        return Published()

    def _apply(self, files: _Files, m: Manifest, event: EditionEvent, artifact: Artifact | None, published: str,
               changed: str) -> Parked | None:
        """The event against what the site holds: an older revision than the page's changes
        nothing (a late redelivery); the same revision is delivered again (byte-identical);
        a newer one is published, corrected or withdrawn."""
        product, date, lang = event.product, event.edition_date, event.lang
        entry, gone = m.get(product, lang, date), m.withdrawal(product, lang, date)
        current = max(entry.revision if entry else 0, gone.revision if gone else 0)
        if event.revision < current:
            log.info("static_stale_event", event_id=event.event_id, revision=event.revision, current=current,
                     product=product, edition_date=date, lang=lang)
            return None
        if event.type == EventType.WITHDRAWN:
            if entry is not None and event.revision == current and gone is None:
                return Parked(f"static: revision {current} of {product} {date} {lang} is published, not withdrawn")
            self._withdraw(files, m, event, entry, gone, published, changed)
            return None
        assert artifact is not None
        if event.type == EventType.PUBLISHED:
            if gone is not None:
                return None  # withdrawn at this revision (a rebuilt manifest): the withdrawal stands
            live = self._live_sha256(artifact)
            if live is not None and live != artifact.sha256 and not self.may_replace(event.job_id):
                # Public truth: what readers already saw is not silently replaced (e.g. after a restore).
                return Parked(
                    f"conflicting_republish: {artifact.product} {artifact.edition_date} {artifact.lang} is "
                    f"live with sha256 {live[:12]}…, this edition is {artifact.sha256[:12]}…; "
                    f"`iipub republish {event.job_id} --reason …` lets it replace the page")
            self._publish(files, m, artifact, published)
            return None
        # A correction: the operator's consent to write over the live page, at a newer revision.
        if event.revision == current and entry is not None and entry.sha256 != artifact.sha256:
            return Parked(f"static: revision {current} of {product} {date} {lang} is live with other content "
                          f"(sha256 {entry.sha256[:12]}…)")
        first = entry.published if entry is not None else gone.published if gone is not None else published
        self._publish(files, m, artifact, first,
                      Entry(date, artifact.title, artifact.sha256, first, revision=event.revision, corrected=changed,
                            note=event.public_note))
        return None

    # -- state ------------------------------------------------------------------------

    def _files(self) -> _Files:
        tmp = self.state_dir / "tmp"
        _ensure_dir(tmp)
        # A rename is atomic only within one filesystem: with the state elsewhere, temporary
        # files go next to their target (dot-named, for the instant before the rename).
        same = os.stat(tmp).st_dev == os.stat(self.root).st_dev
        return _Files(tmp if same else None)

    def _root_key(self) -> str:
        return os.path.abspath(self.root)

    def _live_sha256(self, art: Artifact) -> str | None:
        """The hash of the edition already published for this product, date and language."""
        path = self.root / json_path(art.product, art.edition_date, art.lang)
        try:
            live = path.read_bytes()
            # The same bytes (a redelivery): no need to parse them to know their hash.
            return art.sha256 if live == art.body else artifact_from_json(live).sha256
        except (FileNotFoundError, NotADirectoryError):
            return None
        except ValueError:
            return "unreadable"  # something is there that we did not write: not ours to replace

    def _rebuild(self, files: _Files) -> Manifest:
        """A new manifest from `<root>/<product>/<date>/<lang>.json`, each edition's publication
        time read back from its page (midnight of its date, marked guessed, when the page does
        not say). Also clears what earlier versions of this sink left in the public tree."""
        entries: list[tuple[str, str, Entry]] = []
        withdrawals: list[tuple[str, str, Withdrawal]] = []
        _remove_leftovers(self.root, lock_files=True)
        for product_dir in sorted(self.root.iterdir()):
            if not (NAME_RE.fullmatch(product_dir.name) and product_dir.is_dir()):
                continue
            for sub in sorted(product_dir.iterdir()):
                if LANG_RE.fullmatch(sub.name) and sub.is_dir():
                    _remove_leftovers(sub, lock_files=True)
                elif DATE_RE.fullmatch(sub.name) and sub.is_dir():
                    for lang, found, on_page in _editions_in(product_dir.name, sub):
                        if isinstance(found, Withdrawal):
                            withdrawals.append((product_dir.name, lang, found))
                            continue
                        art, (published, correction) = found, on_page
                        revision, corrected, note = correction or (1, None, None)
                        entries.append((art.product, lang, Entry(art.edition_date, art.title, art.sha256,
                                                                 published or midnight(art.edition_date),
                                                                 guessed=published is None, revision=revision,
                                                                 corrected=corrected, note=note)))
                        self._remember(art)
        return Manifest.create(self.state_dir, self._root_key(), files.write, entries, self._cache, withdrawals)

    def _manifest(self, files: _Files) -> Manifest:
        return Manifest.open(self.state_dir, self._root_key(), files.write, self._cache) or self._rebuild(files)

    def _render_key(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self.site.fingerprint()
        return self._fingerprint

    # -- publishing -------------------------------------------------------------------

    def _publish(self, files: _Files, m: Manifest, art: Artifact, published: str,
                 corrected: Entry | None = None) -> None:
        product, date, lang = art.product, art.edition_date, art.lang
        _ensure_dir(self.root / product / date)
        _ensure_dir(self.root / product / lang)
        files.write(self.root / json_path(product, date, lang), art.body)
        old = m.get(product, lang, date)
        if corrected is not None:
            entry = corrected
            m.drop_withdrawal(product, lang, date)  # a withdrawn edition corrected is listed again
        elif old is not None and old.sha256 == art.sha256 and not old.guessed:
            entry = old  # the same content again: it keeps the time it was first published
        else:
            entry = Entry(date, art.title, art.sha256, published)
        m.put(product, lang, entry)
        self._remember(art)
        if m.render != self._render_key():
            self._render_all(files, m)  # another version or configuration rendered this site
            return
        self._render_around(files, m, art, entry)

    def _withdraw(self, files: _Files, m: Manifest, event: EditionEvent, entry: Entry | None,
                  gone: Withdrawal | None, published: str, changed: str) -> None:
        """Take an edition off the site: its JSON becomes the withdrawal's record, its page the
        notice, and every page that listed or linked to it is rendered without it."""
        product, date, lang = event.product, event.edition_date, event.lang
        first = entry.published if entry is not None else gone.published if gone is not None else published
        w = Withdrawal(date, event.sha256, event.revision, first, changed, event.public_note)
        if gone is not None and gone.revision == w.revision:
            w = gone  # delivered again: it keeps the time it was first withdrawn
        _ensure_dir(self.root / product / date)
        _ensure_dir(self.root / product / lang)
        recent = {e.date for e in m.recent(product, lang, FEED_ENTRIES)}
        neighbours = (m.prev(product, lang, date), m.next(product, lang, date))
        m.set_withdrawal(product, lang, w)
        m.remove(product, lang, date)
        files.write(self.root / json_path(product, date, lang), withdrawn_json(product, lang, w))
        self._artifacts.pop((product, date, lang))
        if m.render != self._render_key():
            self._render_all(files, m)
            return
        self._notice(files, m, product, lang, w)
        for near in neighbours:
            if near is not None:
                self._edition_of(files, m, product, lang, near)
        month = date[:7]
        for code in self.site.order_langs(product, set(m.langs(product)) | {lang}):
            if code != lang and (e := m.get(product, code, date)) is not None:
                self._edition_of(files, m, product, code, e)
            self._month(files, m, product, code, month)
            self._index(files, m, product, code)
        for near_month in (m.prev_month(product, lang, month), m.next_month(product, lang, month)):
            if near_month is not None:
                self._month(files, m, product, lang, near_month)
        if date in recent or not (self.root / feed_path(product, lang)).is_file():
            self._feed(files, m, product, lang, m.recent(product, lang, FEED_ENTRIES))
        self._site_index(files, m)

    def _notice(self, files: _Files, m: Manifest, product: str, lang: str, w: Withdrawal) -> None:
        langs = [code for code in self.site.order_langs(product, m.langs(product))
                 if m.get(product, code, w.date) is not None]
        page = self.site.withdrawn_page(product, lang, w, langs)
        files.write(self.root / edition_path(product, w.date, lang), page.encode("utf-8"))

    def _render_around(self, files: _Files, m: Manifest, art: Artifact, entry: Entry) -> None:
        """The pages whose content depends on this edition's place in the manifest."""
        product, date, lang = art.product, art.edition_date, art.lang
        langs = self.site.order_langs(product, m.langs(product))
        self._edition(files, m, art, entry)
        for neighbour in (m.prev(product, lang, date), m.next(product, lang, date)):
            if neighbour is not None:
                self._edition_of(files, m, product, lang, neighbour)
        # The other languages' pages name this one (alternates, switcher) once it exists, and
        # depend on it for nothing else: each is rendered while it does not name it yet.
        month = date[:7]
        for other in langs:
            if other == lang:
                continue
            if (e := m.get(product, other, date)) is not None and not self._names(
                    edition_path(product, date, other), lang):
                self._edition_of(files, m, product, other, e)
            if m.has_month(product, other, month) and not self._names(month_path(product, other, month), lang):
                self._month(files, m, product, other, month)
            if not self._names(index_path(product, other), lang):
                self._index(files, m, product, other)
        self._month(files, m, product, lang, month)
        for near in (m.prev_month(product, lang, month), m.next_month(product, lang, month)):
            if near is not None:
                self._month(files, m, product, lang, near)
        self._index(files, m, product, lang)
        recent = m.recent(product, lang, FEED_ENTRIES)
        if any(e.date == date for e in recent) or not (self.root / feed_path(product, lang)).is_file():
            self._feed(files, m, product, lang, recent)
        self._site_index(files, m)

    def _names(self, page: str, lang: str) -> bool:
        """Whether the page links to its version in `lang` (every such link, alternate or
        switcher, carries `hreflang`; escaped text cannot hold the attribute)."""
        try:
            return f'hreflang="{lang}"'.encode() in (self.root / page).read_bytes()
        except OSError:
            return False

    def _render_all(self, files: _Files, m: Manifest) -> None:
        for product in m.products():
            for lang in m.langs(product):
                _ensure_dir(self.root / product / lang)
                months = m.months(product, lang)
                entries = [e for month in months for e in m.month_entries(product, lang, month)]
                for i, e in enumerate(entries):
                    art = self._artifact(product, lang, e)
                    if art is not None:
                        around = (entries[i - 1] if i else None, entries[i + 1] if i + 1 < len(entries) else None)
                        self._edition(files, m, art, e, around)
                for month in months:
                    self._month(files, m, product, lang, month)
                self._index(files, m, product, lang)
                self._feed(files, m, product, lang, m.recent(product, lang, FEED_ENTRIES))
        for product, lang, w in m.withdrawals():
            self._notice(files, m, product, lang, w)
        self._site_index(files, m)
        m.set_render(self._render_key())

    # -- pages ------------------------------------------------------------------------

    def _edition(self, files: _Files, m: Manifest, art: Artifact, entry: Entry,
                 around: tuple[Entry | None, Entry | None] | None = None) -> None:
        product, date, lang = art.product, art.edition_date, art.lang
        prev, nxt = around if around is not None else (m.prev(product, lang, date), m.next(product, lang, date))
        langs = [code for code in self.site.order_langs(product, m.langs(product))
                 if code == lang or m.get(product, code, date) is not None]
        page = self.site.edition_page(art, entry, prev, nxt, langs)
        files.write(self.root / edition_path(product, date, lang), page.encode("utf-8"))

    def _edition_of(self, files: _Files, m: Manifest, product: str, lang: str, entry: Entry) -> None:
        art = self._artifact(product, lang, entry)
        if art is not None:
            self._edition(files, m, art, entry)

    def _month(self, files: _Files, m: Manifest, product: str, lang: str, month: str) -> None:
        langs = [code for code in self.site.order_langs(product, m.langs(product))
                 if code == lang or m.has_month(product, code, month)]
        page = self.site.month_page(product, lang, month, m.month_entries(product, lang, month),
                                    m.prev_month(product, lang, month), m.next_month(product, lang, month), langs)
        files.write(self.root / month_path(product, lang, month), page.encode("utf-8"))

    def _index(self, files: _Files, m: Manifest, product: str, lang: str) -> None:
        counts = m.month_counts(product, lang)
        months = sorted(counts.items(), reverse=True)
        page = self.site.index_page(product, lang, m.recent(product, lang, INDEX_ENTRIES), months,
                                    m.total(product, lang), self.site.order_langs(product, m.langs(product)))
        files.write(self.root / index_path(product, lang), page.encode("utf-8"))

    def _feed(self, files: _Files, m: Manifest, product: str, lang: str, recent: list[Entry]) -> None:
        entries = [(e, art) for e in recent if (art := self._artifact(product, lang, e)) is not None]
        files.write(self.root / feed_path(product, lang), self.site.feed(product, lang, entries).encode("utf-8"))

    def _site_index(self, files: _Files, m: Manifest) -> None:
        series = []
        for product in self.site.order_products(m.products()):
            for lang in self.site.order_langs(product, m.langs(product)):
                latest = m.recent(product, lang, 1)
                if latest:
                    series.append((product, lang, latest[0], m.total(product, lang)))
        files.write(self.root / SITE_INDEX, self.site.site_index(series).encode("utf-8"))

    # -- artifacts --------------------------------------------------------------------

    def _remember(self, art: Artifact) -> None:
        self._artifacts.put((art.product, art.edition_date, art.lang), art)

    def _artifact(self, product: str, lang: str, entry: Entry) -> Artifact | None:
        """The published artifact the manifest entry names (None if its file is gone or damaged)."""
        cached = self._artifacts.get((product, entry.date, lang))
        if cached is not None and cached.sha256 == entry.sha256:
            return cached
        art = _read_artifact(self.root / json_path(product, entry.date, lang), product, entry.date, lang)
        if art is not None:
            self._remember(art)
        return art


def _read_artifact(path: Path, product: str, date: str, lang: str) -> Artifact | None:
    try:
        art = artifact_from_json(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:
        return None  # a foreign or damaged file must not take the site down
    return art if (art.product, art.edition_date, art.lang) == (product, date, lang) else None


# --- checks ---------------------------------------------------------------------------------


def _check_parts(product: str, date: str, lang: str) -> str | None:
    """Refuse anything that could name a path outside `<root>/<product>/...`."""
    if not NAME_RE.fullmatch(product):
        return f"invalid product name {product[:80]!r}"
    if not LANG_RE.fullmatch(lang):
        return f"invalid language {lang[:80]!r}"
    if not DATE_RE.fullmatch(date):
        return f"invalid edition date {date[:80]!r}"
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        return f"invalid edition date {date!r}"
    return None


def _utc_stamp(text: str) -> str | None:
    """`published_at` as `YYYY-MM-DDTHH:MM:SSZ` (UTC), or None if it is not a time with an offset."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None or not 1970 <= when.year <= 9999:
        return None
    return iso_z(when, "seconds")


# --- files ----------------------------------------------------------------------------------


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
        fsync_dir(d.parent)


class _Files:
    """Replaces files so readers see the old or the new one, never a mix: a temporary file
    (in `tmp_dir`, outside the public tree, when it is on the same filesystem), fsync, rename.
    The directories are fsynced once per delivery (`sync`), before it is acknowledged: a
    delivery cut short before that is delivered again, and the manifest repairs itself then."""

    def __init__(self, tmp_dir: Path | None) -> None:
        self.tmp_dir = tmp_dir
        self._dirty: set[Path] = set()

    def write(self, path: Path, data: bytes) -> bool:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            if path.read_bytes() == data:
                return False  # already there: leave the file (and its mtime) alone
        replace_atomically(path, data, tmp_dir=self.tmp_dir)
        self._dirty.add(path.parent)
        return True

    def sync(self) -> None:
        for d in sorted(self._dirty):
            fsync_dir(d)
        self._dirty.clear()


def _remove_leftovers(folder: Path, *, lock_files: bool = False, quiet: bool = False) -> None:
    """Temporary files a dead delivery left in `folder` (under the lock no other delivery is
    writing), and with `lock_files` the per-index `.lock` of sinks before the manifest; `quiet`
    ignores a file that cannot be removed."""
    with os.scandir(folder) as found:
        for leftover in found:
            if ((_TMP_RE.fullmatch(leftover.name) or (lock_files and leftover.name == ".lock"))
                    and leftover.is_file()):
                try:
                    os.unlink(leftover.path)
                except OSError:
                    if not quiet:
                        raise


def _editions_in(product: str, day: Path) -> Iterator[
        tuple[str, Artifact | Withdrawal, tuple[str | None, tuple[int, str, str | None] | None]]]:
    """The readable editions in a date folder: language, artifact (or the withdrawal its JSON
    records) and what its page records: the publication time (None if the page does not say)
    and its correction (revision, time, note) if any; its temporary files are removed first."""
    _remove_leftovers(day)
    for path in sorted(day.iterdir()):
        lang = path.name.removesuffix(".json")
        if not (path.name.endswith(".json") and LANG_RE.fullmatch(lang)):
            continue
        try:
            body = path.read_bytes()
        except OSError:
            continue
        gone = withdrawal_from_json(body, product, day.name, lang)
        if gone is not None:
            yield lang, gone, (None, None)
            continue
        art = _read_artifact(path, product, day.name, lang)
        if art is None:
            continue
        try:
            page = (day / f"{lang}.html").read_bytes()
        except OSError:
            page = b""
        yield lang, art, (published_in_page(page), correction_in_page(page))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
