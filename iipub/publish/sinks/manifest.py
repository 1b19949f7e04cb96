"""The static sink's manifest: what is published, kept outside the public tree, so that a
delivery reads and rewrites a few small files instead of every edition of the archive.

Under the sink's state directory:

    manifest/catalog.json                      {"format", "root", "render",
                                                "series": {product: {lang: {"YYYY-MM": editions}}}}
    manifest/<product>/<lang>/<YYYY-MM>.json   {"format", "entries": {date: {title, sha256, published}}}
    manifest/withdrawn.json                    {"format", "withdrawn": {product: {lang: {date: withdrawal}}}}

A withdrawn edition leaves its month's shard (nothing lists it any more) for the small file of
withdrawals, which remembers its revision so that a late delivery of an older one changes nothing.

A month shard holds at most 31 entries and the catalog one number per month, so what one
delivery reads does not grow with the archive. Every file is canonical JSON, replaced
atomically (the caller's writer), a shard before the catalog that counts it. The manifest is a
cache of the public tree: a catalog that is missing, unreadable, of another format or recorded
for another root is rebuilt from the editions on disk (`StaticSink`), and so is the whole
manifest when a shard does not match its catalog (`ManifestError`).
"""

from __future__ import annotations

import bisect
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from iipub.edition.compose import DATE_RE, canonical_json
from iipub.publish.sinks.lru import Lru
from iipub.publish.sinks.site import LANG_RE, Entry, Withdrawal
from iipub.settings.config import NAME_RE

FORMAT = 1
_MONTH_RE = re.compile(r"^\d{4}-\d{2}$")
_STAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")

Writer = Callable[[Path, bytes], bool]
_T = TypeVar("_T")
_Series = dict[str, dict[str, dict[str, int]]]


class FileCache:
    """Manifest files as parsed and checked, kept between deliveries of one sink while each file
    is the same one (inode, modification time and size: every write replaces the file)."""

    def __init__(self, size: int = 2048) -> None:
        self._files: Lru[Path, tuple[tuple[int, int, int], Any]] = Lru(size)

    def get(self, path: Path, load: Callable[[bytes], _T]) -> _T:
        """`load(bytes)` of the file, or what it gave last time; raises OSError like a read."""
        key = _identity(path)
        hit = self._files.get(path)
        if hit is not None and hit[0] == key:
            value: _T = hit[1]
            return value
        value = load(path.read_bytes())
        self.put(path, value, key)
        return value

    def put(self, path: Path, value: Any, key: tuple[int, int, int] | None = None) -> None:
        try:
            self._files.put(path, (key or _identity(path), value))
        except OSError:
            self._files.pop(path)


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class ManifestError(Exception):
    """The manifest does not match itself (a damaged or foreign shard): rebuild it."""


def _dump(doc: Any) -> bytes:
    return canonical_json(doc) + b"\n"


def _entry_doc(e: Entry) -> dict[str, Any]:
    doc: dict[str, Any] = {"title": e.title, "sha256": e.sha256, "published": e.published}
    if e.guessed:
        doc["guessed"] = True
    if e.revision != 1:  # the keys of a correction only where there is one: older manifests read the same
        doc["revision"] = e.revision
    if e.corrected is not None:
        doc["corrected"] = e.corrected
    if e.note is not None:
        doc["note"] = e.note
    return doc


def _entry(date: str, doc: Any) -> Entry:
    if not (DATE_RE.fullmatch(date) and isinstance(doc, dict) and isinstance(doc.get("title"), str)
            and isinstance(doc.get("sha256"), str) and _SHA_RE.fullmatch(doc["sha256"])
            and isinstance(doc.get("published"), str) and _STAMP_RE.fullmatch(doc["published"])
            and isinstance(doc.get("guessed", False), bool) and _revision_ok(doc.get("revision", 1))
            and _stamp_or_none(doc.get("corrected")) and isinstance(doc.get("note", ""), str)):
        raise ManifestError(f"malformed manifest entry for {date!r}")
    return Entry(date, doc["title"], doc["sha256"], doc["published"], doc.get("guessed", False),
                 doc.get("revision", 1), doc.get("corrected"), doc.get("note"))


def _revision_ok(value: Any) -> bool:
    return type(value) is int and value >= 1


def _stamp_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and _STAMP_RE.fullmatch(value) is not None)


def _withdrawal_doc(w: Withdrawal) -> dict[str, Any]:
    doc: dict[str, Any] = {"sha256": w.sha256, "revision": w.revision, "published": w.published,
                           "withdrawn": w.withdrawn}
    if w.note is not None:
        doc["note"] = w.note
    return doc


def _withdrawal(date: str, doc: Any) -> Withdrawal:
    if not (DATE_RE.fullmatch(date) and isinstance(doc, dict) and isinstance(doc.get("sha256"), str)
            and _SHA_RE.fullmatch(doc["sha256"]) and _revision_ok(doc.get("revision"))
            and isinstance(doc.get("published"), str) and _STAMP_RE.fullmatch(doc["published"])
            and isinstance(doc.get("withdrawn"), str) and _STAMP_RE.fullmatch(doc["withdrawn"])
            and isinstance(doc.get("note", ""), str)):
        raise ManifestError(f"malformed withdrawal for {date!r}")
    return Withdrawal(date, doc["sha256"], doc["revision"], doc["published"], doc["withdrawn"], doc.get("note"))


_Withdrawn = dict[str, dict[str, dict[str, Withdrawal]]]


def _withdrawn_file(body: bytes) -> _Withdrawn:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"unreadable withdrawals: {exc}") from None
    if not (isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("withdrawn"), dict)):
        raise ManifestError("malformed withdrawals")
    out: _Withdrawn = {}
    for product, langs in doc["withdrawn"].items():
        if not (NAME_RE.fullmatch(product) and isinstance(langs, dict)):
            raise ManifestError("malformed withdrawals")
        for lang, dates in langs.items():
            if not (LANG_RE.fullmatch(lang) and isinstance(dates, dict)):
                raise ManifestError("malformed withdrawals")
            out.setdefault(product, {})[lang] = {d: _withdrawal(d, w) for d, w in dates.items()}
    return out


class Manifest:
    """The manifest of one public root, read under the sink's lock (shards are read lazily and
    kept for the life of this object: one delivery)."""

    def __init__(self, state_dir: Path, root: str, write: Writer, series: _Series, render: str,
                 cache: FileCache | None = None) -> None:
        self.dir = state_dir / "manifest"
        self.root = root
        self._write = write
        self._series = series
        self.render = render
        self._shards: dict[tuple[str, str, str], dict[str, Entry]] = {}
        self._cache = cache if cache is not None else FileCache()
        self._withdrawn: _Withdrawn | None = None  # read at the first question about a withdrawal

    # -- opening and rebuilding -------------------------------------------------------

    @classmethod
    def open(cls, state_dir: Path, root: str, write: Writer, cache: FileCache | None = None) -> Manifest | None:
        """The manifest, or None when it must be rebuilt."""
        cache = cache if cache is not None else FileCache()
        try:
            found = cache.get(state_dir / "manifest" / "catalog.json", _catalog)
        except OSError:
            return None
        if found is None or found[0] != root:
            return None
        _, render, series = found
        copy = {p: {lang: dict(ms) for lang, ms in langs.items()} for p, langs in series.items()}
        return cls(state_dir, root, write, copy, render, cache)

    @classmethod
    def create(cls, state_dir: Path, root: str, write: Writer, entries: Iterable[tuple[str, str, Entry]],
               cache: FileCache | None = None, withdrawals: Iterable[tuple[str, str, Withdrawal]] = ()) -> Manifest:
        """A new manifest holding `entries` (product, lang, entry) and `withdrawals`, replacing any
        other. Its `render` is empty, so the caller renders the whole site once."""
        folder = state_dir / "manifest"
        shutil.rmtree(folder, ignore_errors=True)
        m = cls(state_dir, root, write, {}, "", cache)
        m._withdrawn = {}
        for product, lang, w in withdrawals:
            m._withdrawn.setdefault(product, {}).setdefault(lang, {})[w.date] = w
        if m._withdrawn:
            m._write_withdrawn()
        for product, lang, e in entries:
            m._shards.setdefault((product, lang, e.date[:7]), {})[e.date] = e
        for (product, lang, month), shard in sorted(m._shards.items()):
            m._write_shard(product, lang, month, shard)
            m._series.setdefault(product, {}).setdefault(lang, {})[month] = len(shard)
        m._write_catalog()  # last: a rebuild cut short leaves no catalog, so it runs again
        return m

    # -- reading ----------------------------------------------------------------------

    def products(self) -> list[str]:
        return sorted(self._series)

    def langs(self, product: str) -> list[str]:
        return sorted(self._series.get(product, {}))

    def months(self, product: str, lang: str) -> list[str]:
        """Months with editions, oldest first."""
        return sorted(self._series.get(product, {}).get(lang, {}))

    def month_counts(self, product: str, lang: str) -> dict[str, int]:
        return dict(self._series.get(product, {}).get(lang, {}))

    def total(self, product: str, lang: str) -> int:
        return sum(self._series.get(product, {}).get(lang, {}).values())

    def has_month(self, product: str, lang: str, month: str) -> bool:
        return month in self._series.get(product, {}).get(lang, {})

    def month_entries(self, product: str, lang: str, month: str) -> list[Entry]:
        """The month's editions, oldest first."""
        shard = self._shard(product, lang, month)
        return [shard[d] for d in sorted(shard)]

    def get(self, product: str, lang: str, date: str) -> Entry | None:
        return self._shard(product, lang, date[:7]).get(date)

    def prev(self, product: str, lang: str, date: str) -> Entry | None:
        """The edition published for the nearest earlier date."""
        return next(self._walk(product, lang, date, backwards=True), None)

    def next(self, product: str, lang: str, date: str) -> Entry | None:
        return next(self._walk(product, lang, date, backwards=False), None)

    def recent(self, product: str, lang: str, n: int) -> list[Entry]:
        """The `n` latest editions, newest first."""
        out: list[Entry] = []
        for month in reversed(self.months(product, lang)):
            out.extend(reversed(self.month_entries(product, lang, month)))
            if len(out) >= n:
                break
        return out[:n]

    def prev_month(self, product: str, lang: str, month: str) -> str | None:
        months = self.months(product, lang)
        i = bisect.bisect_left(months, month)
        return months[i - 1] if i > 0 else None

    def next_month(self, product: str, lang: str, month: str) -> str | None:
        months = self.months(product, lang)
        i = bisect.bisect_right(months, month)
        return months[i] if i < len(months) else None

    def _walk(self, product: str, lang: str, date: str, *, backwards: bool) -> Iterator[Entry]:
        months = self.months(product, lang)
        month = date[:7]
        if backwards:
            candidates = list(reversed(months[:bisect.bisect_right(months, month)]))
        else:
            candidates = months[bisect.bisect_left(months, month):]
        for m in candidates:
            entries = self.month_entries(product, lang, m)
            if backwards:
                yield from (e for e in reversed(entries) if e.date < date)
            else:
                yield from (e for e in entries if e.date > date)

    def _shard(self, product: str, lang: str, month: str) -> dict[str, Entry]:
        key = (product, lang, month)
        if key in self._shards:
            return self._shards[key]
        counted = self._series.get(product, {}).get(lang, {}).get(month, 0)
        shard: dict[str, Entry] = {}
        if counted:
            path = self._shard_path(product, lang, month)
            try:
                shard = self._cache.get(path, lambda body: _shard(body, month))
            except OSError as exc:
                raise ManifestError(f"unreadable manifest shard {path}: {exc}") from None
        self._shards[key] = shard
        return shard

    # -- writing ----------------------------------------------------------------------

    def put(self, product: str, lang: str, entry: Entry) -> None:
        """Record `entry` (an edition published or replaced): its month's shard, then the
        catalog's count of it. Writes nothing when both already say so."""
        month = entry.date[:7]
        shard = dict(self._shard(product, lang, month))
        if shard.get(entry.date) != entry:
            shard[entry.date] = entry
            self._write_shard(product, lang, month, shard)
        self._shards[(product, lang, month)] = shard
        months = self._series.setdefault(product, {}).setdefault(lang, {})
        if months.get(month) != len(shard):
            months[month] = len(shard)
            self._write_catalog()

    def remove(self, product: str, lang: str, date: str) -> None:
        """Take an edition out of its month (a withdrawal): the shard, then the catalog's count."""
        month = date[:7]
        shard = dict(self._shard(product, lang, month))
        if shard.pop(date, None) is None:
            return
        self._write_shard(product, lang, month, shard)
        self._shards[(product, lang, month)] = shard
        langs = self._series.setdefault(product, {})
        months = langs.setdefault(lang, {})
        if shard:
            months[month] = len(shard)
        else:
            months.pop(month, None)
            if not months:
                langs.pop(lang, None)
                if not langs:
                    self._series.pop(product, None)
        self._write_catalog()

    # -- withdrawals ------------------------------------------------------------------

    def withdrawal(self, product: str, lang: str, date: str) -> Withdrawal | None:
        return self._withdrawals().get(product, {}).get(lang, {}).get(date)

    def withdrawals(self) -> list[tuple[str, str, Withdrawal]]:
        return [(p, lang, w) for p, langs in sorted(self._withdrawals().items())
                for lang, dates in sorted(langs.items()) for _, w in sorted(dates.items())]

    def set_withdrawal(self, product: str, lang: str, w: Withdrawal) -> None:
        found = self._withdrawals()
        if found.get(product, {}).get(lang, {}).get(w.date) != w:
            found.setdefault(product, {}).setdefault(lang, {})[w.date] = w
            self._write_withdrawn()

    def drop_withdrawal(self, product: str, lang: str, date: str) -> None:
        """An edition corrected after its withdrawal is listed again."""
        found = self._withdrawals()
        dates = found.get(product, {}).get(lang, {})
        if dates.pop(date, None) is not None:
            self._write_withdrawn()

    def _withdrawals(self) -> _Withdrawn:
        if self._withdrawn is None:
            try:
                self._withdrawn = self._cache.get(self.dir / "withdrawn.json", _withdrawn_file)
            except FileNotFoundError:
                self._withdrawn = {}
            except OSError as exc:
                raise ManifestError(f"unreadable withdrawals: {exc}") from None
            self._withdrawn = {p: {lang: dict(d) for lang, d in langs.items()} for p, langs in self._withdrawn.items()}
        return self._withdrawn

    def _write_withdrawn(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        found = self._withdrawals()
        doc = {p: {lang: {d: _withdrawal_doc(w) for d, w in sorted(dates.items())}
                   for lang, dates in sorted(langs.items()) if dates}
               for p, langs in sorted(found.items())}
        path = self.dir / "withdrawn.json"
        self._write(path, _dump({"format": FORMAT, "withdrawn": {p: v for p, v in doc.items() if v}}))
        self._cache.put(path, found)

    def set_render(self, render: str) -> None:
        if render != self.render:
            self.render = render
            self._write_catalog()

    def _shard_path(self, product: str, lang: str, month: str) -> Path:
        return self.dir / product / lang / f"{month}.json"

    def _write_shard(self, product: str, lang: str, month: str, shard: dict[str, Entry]) -> None:
        path = self._shard_path(product, lang, month)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write(path, _dump({"format": FORMAT, "entries": {d: _entry_doc(e) for d, e in sorted(shard.items())}}))
        self._cache.put(path, dict(shard))

    def _write_catalog(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        series = {p: {lang: dict(sorted(ms.items())) for lang, ms in sorted(langs.items())}
                  for p, langs in sorted(self._series.items())}
        path = self.dir / "catalog.json"
        self._write(path, _dump({"format": FORMAT, "root": self.root, "render": self.render, "series": series}))
        self._cache.put(path, (self.root, self.render, series))


def _catalog(body: bytes) -> tuple[str, str, _Series] | None:
    """(root, render, series) of a catalog, or None when it is not one this version wrote."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("root"), str)
            and isinstance(doc.get("render"), str) and isinstance(doc.get("series"), dict)):
        return None
    series: _Series = {}
    for product, langs in doc["series"].items():
        if not (NAME_RE.fullmatch(product) and isinstance(langs, dict)):
            return None
        for lang, months in langs.items():
            if not LANG_RE.fullmatch(lang) or not isinstance(months, dict) or not all(
                isinstance(m, str) and _MONTH_RE.fullmatch(m) and type(n) is int and n > 0 for m, n in months.items()
            ):
                return None
            if months:
                series.setdefault(product, {})[lang] = dict(months)
    return doc["root"], doc["render"], series


def _shard(body: bytes, month: str) -> dict[str, Entry]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"unreadable manifest shard of {month}: {exc}") from None
    if not (isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("entries"), dict)):
        raise ManifestError(f"malformed manifest shard of {month}")
    shard = {d: _entry(d, v) for d, v in doc["entries"].items()}
    if any(d[:7] != month for d in shard):
        raise ManifestError(f"the manifest shard of {month} holds another month's dates")
    return shard
