"""Deterministic checks on the model's output before anything is composed or published.

The payload is untrusted: it is bounded in size before parsing, parsed strictly, held to the
product's schema, and every text and URL in it is checked. All problems are collected (up to
`MAX_REASONS`) so one validation failure tells an operator everything that was wrong.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from iipub.settings.config import Product
from iipub.settings.edition_limits import MAX_URL

if TYPE_CHECKING:  # pydantic is imported when a payload is validated, not by every cron run
    from pydantic import BaseModel

MAX_REASONS = 50

# C0 except \t and \n, DEL, C1, bidi embeddings/overrides/isolates, and lone surrogates
# (a JSON `\ud800` escape decodes to one; it cannot be encoded as UTF-8 on the way out).
_BAD_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")

# Names that never resolve on the public internet (RFC 6761, 6762, 7686, 8375, 9476 and
# common private conventions).
_PRIVATE_SUFFIXES = (
    "localhost",
    "local",
    "internal",
    "lan",
    "home",
    "test",
    "invalid",
    "example",
    "onion",
    "localdomain",
    "arpa",
    "corp",
    "alt",
)
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_TLD = re.compile(r"^(?:[a-z]{2,63}|xn--[a-z0-9-]{1,59})$")
# Whitespace, controls and backslashes: browsers strip or reinterpret them (`\` becomes `/`
# in http URLs, so `http://evil\@good/` goes to `evil`), so such a URL is never trusted.
_URL_BAD_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f\\\u00a0\u1680\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff]")


@dataclass(frozen=True)
class Validation:
    ok: bool
    reasons: tuple[str, ...]
    edition: BaseModel | None  # set only when ok: a failed payload can never be composed


@dataclass(frozen=True)
class Shared:
    """The checks of a slot's whole payload, before it forks into language tracks: size, UTF-8,
    strict JSON without duplicate keys, exactly the product's languages (each an object), and no
    text copied across languages. `parts` (set only when ok) maps each language to its part."""

    ok: bool
    reasons: tuple[str, ...]
    parts: Mapping[str, Any]


def validate(payload_text: str | None, product: Product) -> Validation:
    """Check a whole model payload against `product` (the shared checks and every language's);
    never raises for bad input."""
    reasons = _Reasons()
    data = _parsed(payload_text, product, reasons)
    if data is _UNPARSED:
        return _fail(reasons)
    _shape(data, product, reasons)
    editions: dict[str, BaseModel] = {}
    if isinstance(data, dict):
        for lang in product.languages:
            if isinstance(data.get(lang), dict):
                part = _language(data[lang], product, lang, reasons)
                if part is not None:
                    editions[lang] = part
    for reason in _same_text(data, product.languages):
        reasons.add(reason)
    if reasons:
        return _fail(reasons)
    from iipub.settings import edition_schema

    model = edition_schema.output_model(tuple(product.languages), product.items)
    return Validation(ok=True, reasons=(), edition=model.model_construct(None, **editions))


def shared(payload_text: str | None, product: Product) -> Shared:
    """The slot's shared checks; never raises for bad input."""
    reasons = _Reasons()
    data = _parsed(payload_text, product, reasons)
    if data is not _UNPARSED:
        _shape(data, product, reasons)
        for path, text in _strings(data, ""):  # a `\ud800` escape: no language could be stored as UTF-8
            found = _SURROGATE.search(text)
            if found:
                reasons.add(f"control_chars: {path or '(root)'} (U+{ord(found.group()):04X})")
        for reason in _same_text(data, product.languages):
            reasons.add(reason)
    if reasons:
        return Shared(ok=False, reasons=_fail(reasons).reasons, parts={})
    assert isinstance(data, dict)
    return Shared(ok=True, reasons=(), parts={lang: data[lang] for lang in product.languages})


def language(part: Any, product: Product, lang: str) -> Validation:
    """One language track's checks on its part (`{"title", "summary", "items"}`): the product's
    schema for one edition, control characters and URLs. `edition` is the validated part."""
    reasons = _Reasons()
    edition = _language(part, product, lang, reasons)
    if reasons or edition is None:
        return _fail(reasons)
    return Validation(ok=True, reasons=(), edition=edition)


_UNPARSED: Any = object()


def _parsed(payload_text: str | None, product: Product, reasons: _Reasons) -> Any:
    """The payload as JSON, bounded before parsing; `_UNPARSED` (with the reason) if it is not."""
    if payload_text is None or not payload_text.strip():
        reasons.add("empty_output")
        return _UNPARSED
    size = len(payload_text.encode("utf-8", "surrogatepass"))
    if size > product.max_output_bytes:
        reasons.add(f"too_large: {size} bytes > {product.max_output_bytes}")
        return _UNPARSED
    bad = _SURROGATE.search(payload_text)
    if bad:
        reasons.add(f"not_utf8: lone surrogate U+{ord(bad.group()):04X} at offset {bad.start()}")
        return _UNPARSED
    try:
        return json.loads(payload_text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        reasons.add(f"duplicate_key: {exc}")
    except json.JSONDecodeError as exc:
        reasons.add(f"not_json: {exc}")
    except RecursionError:
        reasons.add("not_json: nesting too deep")
    return _UNPARSED


def _shape(data: Any, product: Product, reasons: _Reasons) -> None:
    """A top-level object whose keys are exactly the product's languages, each an object."""
    if not isinstance(data, dict):
        reasons.add("schema: (root): Input should be an object")
        return
    for lang in product.languages:
        if lang not in data:
            reasons.add(f"schema: {lang}: Field required")
        elif not isinstance(data[lang], dict):
            reasons.add(f"schema: {lang}: Input should be an object")
    for key in data:
        if key not in product.languages:
            reasons.add(f"schema: {_loc([key])}: Extra inputs are not permitted")
            for path, text in _strings(data[key], key):
                found = _BAD_CHARS.search(text)
                if found:
                    reasons.add(f"control_chars: {path} (U+{ord(found.group()):04X})")


def _language(part: Any, product: Product, lang: str, reasons: _Reasons) -> BaseModel | None:
    from pydantic import ValidationError

    from iipub.settings import edition_schema

    edition: BaseModel | None = None
    try:
        edition = edition_schema.language_model(product.items).model_validate(part)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            reasons.add(f"schema: {_loc([lang, *err['loc']])}: {err['msg']}")
    # The remaining checks walk the raw part, so they report even when the schema check failed.
    for path, text in _strings(part, lang):
        found = _BAD_CHARS.search(text)
        if found:
            reasons.add(f"control_chars: {path} (U+{ord(found.group()):04X})")
    for path, url in _urls({lang: part}):
        problem = url_problem(url, product.allowed_domains)
        if problem:
            kind, detail = problem
            reasons.add(f"{kind}: {path}: {detail}")
    return edition


# --- URLs -----------------------------------------------------------------------------------


def url_problem(url: str, allowed_domains: Sequence[str] = ()) -> tuple[str, str] | None:
    """`None` if `url` is an http(s) URL to a public host name (within `allowed_domains` when
    that is non-empty); otherwise `(kind, detail)` with kind `bad_url` or `domain_not_allowed`."""
    if not isinstance(url, str) or not url:
        return "bad_url", "empty"
    if len(url) > MAX_URL:
        return "bad_url", f"longer than {MAX_URL} characters"
    if _URL_BAD_CHARS.search(url):
        return "bad_url", "contains whitespace, control characters or a backslash"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return "bad_url", f"unparseable ({exc})"
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return "bad_url", f"scheme {scheme!r} is not allowed" if scheme else "no scheme"
    if not url[len(parts.scheme) + 1 :].startswith("//") or not parts.netloc:
        return "bad_url", "no host"
    if "@" in parts.netloc:
        return "bad_url", "userinfo is not allowed"
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return "bad_url", "invalid port"
    raw_host = parts.netloc.rsplit(":", 1)[0] if not parts.netloc.startswith("[") else parts.netloc
    if raw_host.startswith("["):
        return "bad_url", f"host {raw_host!r} is an IP address"
    host, why = _host(raw_host)
    if why:
        return "bad_url", why
    if allowed_domains and not _within(host, allowed_domains):
        return "domain_not_allowed", f"host {host!r} is not in {', '.join(allowed_domains)}"
    return None


def is_public_http_url(url: str) -> bool:
    """True if `url` may be emitted as a link: http(s) to a public host name."""
    return url_problem(url) is None


def _host(raw: str) -> tuple[str, str | None]:
    """Normalise a host name to lower-case ASCII and say why it is not public, if it is not."""
    name = raw.lower()
    name = name.removesuffix(".")  # a fully qualified name: `localhost.` is still localhost
    if not name:
        return name, "no host"
    if _is_ip(name):
        return name, f"host {raw!r} is an IP address"
    ascii_name = ascii_host(name)
    if ascii_name is None:
        return name, f"host {raw!r} is not a valid host name"
    labels = ascii_name.split(".")
    if labels[-1] in _PRIVATE_SUFFIXES:
        return ascii_name, f"host {raw!r} is not public"
    if len(labels) < 2:
        return ascii_name, f"host {raw!r} is not public (no dot)"
    if len(ascii_name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return ascii_name, f"host {raw!r} is not a valid host name"
    if labels[-1].isdigit() or labels[-1].startswith("0x"):
        # WHATWG URL parsing treats a numeric last label as IPv4 (`127.1`, `0x7f.1`).
        return ascii_name, f"host {raw!r} is an IP address"
    if not _TLD.fullmatch(labels[-1]):
        return ascii_name, f"host {raw!r} has an invalid top-level domain"
    if "example" in labels:
        return ascii_name, f"host {raw!r} is a documentation example"
    return ascii_name, None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    # Decimal, hex and octal IPv4 forms that browsers and resolvers accept.
    return bool(re.fullmatch(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}", name))


def ascii_host(name: str) -> str | None:
    """A host name as browsers resolve it: UTS #46 mapping, non-transitional (so `faß.de` stays
    `xn--fa-hia.de`, not `fass.de` as IDNA 2003 would have it), lower-case ASCII; None if it is
    not a valid name."""
    import idna

    text = name.strip().removesuffix(".")
    if not text:
        return None
    try:
        return idna.encode(text, uts46=True, transitional=False).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        return None


def _within(host: str, domains: Sequence[str]) -> bool:
    for domain in domains:
        d = ascii_host(domain.strip().strip("."))
        if d and (host == d or host.endswith("." + d)):
            return True
    return False


# --- walking the raw document ---------------------------------------------------------------


def _strings(node: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            if _BAD_CHARS.search(key):
                yield path, key
            yield from _strings(value, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, f"{path}[{i}]")


def _urls(data: Any) -> Iterator[tuple[str, str]]:
    if not isinstance(data, dict):
        return
    for lang, edition in data.items():
        items = edition.get("items") if isinstance(edition, dict) else None
        for i, item in enumerate(items if isinstance(items, list) else []):
            sources = item.get("sources") if isinstance(item, dict) else None
            for j, source in enumerate(sources if isinstance(sources, list) else []):
                if isinstance(source, dict) and isinstance(source.get("url"), str):
                    yield f"{lang}.items[{i}].sources[{j}]", source["url"]


def _norm(text: Any) -> str | None:
    return " ".join(text.split()).casefold() if isinstance(text, str) and text.strip() else None


def _same_text(data: Any, languages: Sequence[str]) -> Iterator[str]:
    """Each language must be its own text: a copied title, summary or item text is a failed
    translation, whatever the model claims."""
    if not isinstance(data, dict):
        return
    editions = {lang: data[lang] for lang in languages if isinstance(data.get(lang), dict)}
    langs = list(editions)
    for a_i, a in enumerate(langs):
        for b in langs[a_i + 1 :]:
            ea, eb = editions[a], editions[b]
            for field, plural in (("title", "titles"), ("summary", "summaries")):
                na = _norm(ea.get(field))
                if na is not None and na == _norm(eb.get(field)):
                    yield f"same_text: {a} and {b} {plural} are identical"
            texts_b = dict(_item_texts(eb, b))
            for na, path_a in _item_texts(ea, a):
                if na in texts_b:
                    yield f"same_text: {path_a} and {texts_b[na]} are identical"


def _item_texts(edition: dict[str, Any], lang: str) -> Iterator[tuple[str, str]]:
    items = edition.get("items")
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        for field in ("headline", "summary"):
            n = _norm(item.get(field))
            if n is not None:
                yield n, f"{lang}.items[{i}].{field}"


# --- helpers --------------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Parsers disagree on which duplicate wins; refuse the ambiguity outright.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"key {key[:40]!r} appears twice in one object")
        out[key] = value
    return out


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Reasons:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.dropped = 0

    def add(self, reason: str) -> None:
        if reason in self.items:
            return
        if len(self.items) < MAX_REASONS - 1:
            self.items.append(reason[:500])
        else:
            self.dropped += 1

    def __bool__(self) -> bool:
        return bool(self.items)


def _fail(reasons: Sequence[str] | _Reasons) -> Validation:
    if isinstance(reasons, _Reasons):
        items = list(reasons.items)
        if reasons.dropped:
            items.append(f"truncated: {reasons.dropped} more reasons")
        return Validation(ok=False, reasons=tuple(items), edition=None)
    return Validation(ok=False, reasons=tuple(reasons), edition=None)
