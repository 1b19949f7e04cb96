"""The static site's templates: the Jinja2 templates and the stylesheet under `templates/`
(package data), compiled once per process. This is the one module of the site that reads files,
and it reads only the package's own; `site` decides what a page says, the templates how it is
written.

Escaping is the environments' job, never a template's: autoescaping is on for HTML and for XML,
and every `{{ value }}` goes through the environment's `finalize` first, which replaces the
characters that are invalid in XML 1.0 or can disguise text (bidi overrides) and escapes with the
standard library (`html.escape` for HTML, `xml.sax.saxutils.escape` for XML text: the bytes the
pages have always had). What a template, a macro or a cached fragment rendered is already escaped
(it is `Markup`) and passes unchanged. In XML an attribute value is written `name={{ value|attribute }}`
(the filter quotes it, `xml.sax.saxutils.quoteattr`). Text from the model or the configuration is
printed only as `{{ value }}` (or through `attribute`): Jinja's `~` operator and its `join`,
`format` and `replace` filters escape with MarkupSafe's own entities and skip that replacement.

Jinja2 is imported when the first page is rendered, like Babel: a relay run with nothing to
publish does not pay for it. Templates are not reloaded when their files change (a running relay
renders with what it started with); `digest()` is part of the site's fingerprint, so a site is
rendered again in full once its templates have changed.
"""

from __future__ import annotations

import functools
import hashlib
import html
import re
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    import jinja2
    from markupsafe import Markup

__all__ = ["clean", "css", "digest", "html_templates", "xml_templates"]

TEMPLATES = "templates"  # the folder beside this module
STYLESHEET = "site.css"

# Characters that are invalid in XML 1.0 or can disguise text (bidi overrides). Validation
# already refuses them; the site replaces them anyway so no event can break a page or feed.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def clean(text: str) -> str:
    return _UNSAFE.sub("\ufffd", text)


def _folder() -> Traversable:
    return resources.files(__package__) / TEMPLATES


@functools.cache
def css() -> str:
    """The stylesheet every page carries inline (the CSP allows no other): one rule fragment a
    line in the file, joined without separators (the bytes pages always had)."""
    text = (_folder() / STYLESHEET).read_text(encoding="utf-8")
    return "".join(line.strip() for line in text.splitlines())


@functools.cache
def digest() -> str:
    """SHA-256 of every file under `templates/` and of the Jinja2 version that renders them."""
    from jinja2 import __version__ as jinja_version

    h = hashlib.sha256(f"jinja2 {jinja_version}\n".encode())
    for item in sorted(_folder().iterdir(), key=lambda t: t.name):
        if item.is_file():
            h.update(f"{item.name}\n".encode())
            h.update(item.read_bytes())
    return h.hexdigest()


@functools.cache
def html_templates() -> jinja2.Environment:
    """The pages (`*.html`): `{{ value }}` is `html.escape(value, quote=True)`."""
    from markupsafe import Markup

    env = _environment(_finalize(lambda text: html.escape(text, quote=True)))
    env.globals["css"] = Markup(css())  # the package's own file
    return env


@functools.cache
def xml_templates() -> jinja2.Environment:
    """The feeds (`*.atom`): `{{ value }}` is `xml.sax.saxutils.escape(value)` (text content);
    `{{ value|attribute }}` is a quoted attribute value."""
    from markupsafe import Markup

    def attribute(value: Any) -> Markup:
        return Markup(quoteattr(clean(_text(value))))

    env = _environment(_finalize(xml_escape))
    env.filters["attribute"] = attribute
    return env


def _finalize(escape: Callable[[str], str]) -> Callable[[Any], Any]:
    """Every `{{ value }}`: what is already markup passes; anything else is printed as text,
    cleaned and escaped with `escape`."""
    from markupsafe import Markup

    def finalize(value: Any) -> Any:
        if type(value) is not str:
            if hasattr(value, "__html__"):
                return value
            value = _text(value)
        return Markup(escape(clean(value)))

    return finalize


def _text(value: Any) -> str:
    text = str(value)  # an undefined name raises here (StrictUndefined)
    if callable(value):  # `{{ row.count }}` names a method of a tuple, not a field: a template error
        raise TypeError(f"a template printed {text}, not a value")
    return text


def _environment(finalize: Callable[[Any], Any]) -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader(__package__ or "iipub.publish.sinks", TEMPLATES),
        autoescape=True,
        finalize=finalize,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the render instead of printing nothing
        auto_reload=False,  # compiled once: no file checks per render
        cache_size=-1,  # a fixed set of templates: a plain dict, never evicted
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
