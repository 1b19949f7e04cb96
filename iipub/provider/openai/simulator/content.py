"""Deterministic edition text that satisfies a request's `text.format` schema.

The same request (model, slot, seed) always yields the same text, so tests can compare runs.
Languages are the schema's top-level required properties; the item count is the `minItems`
of each edition's `items` array. Content faults bend the result in the ways a real model can.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from iipub.provider.openai.simulator import faults as f

# Sources a validator must reject (loopback, private network, reserved domain, script scheme).
BAD_URLS = (
    "http://localhost/admin",
    "http://10.0.0.5/internal/report",
    "https://example.com/story",
    "javascript:alert(1)",
)
SCRIPT = "<script>alert(1)</script>"
OVERSIZE_BYTES = 1_100_000
_DEFAULT_ITEMS = 3

_PLACES = ("Geneva", "Nairobi", "Jakarta", "Brasília", "Warsaw", "Seoul", "Lima", "Cairo", "Ottawa", "Manila")

_TOPICS: tuple[dict[str, str], ...] = (
    {"en": "the ceasefire talks", "es": "las negociaciones de alto el fuego", "fr": "les négociations de cessez-le-feu",
     "de": "die Waffenstillstandsgespräche", "pt": "as negociações de cessar-fogo", "it": "i negoziati di tregua"},
    {"en": "grain exports", "es": "las exportaciones de cereales", "fr": "les exportations de céréales",
     "de": "die Getreideexporte", "pt": "as exportações de cereais", "it": "le esportazioni di cereali"},
    {"en": "the election results", "es": "los resultados electorales", "fr": "les résultats électoraux",
     "de": "die Wahlergebnisse", "pt": "os resultados eleitorais", "it": "i risultati elettorali"},
    {"en": "interest rates", "es": "los tipos de interés", "fr": "les taux d'intérêt",
     "de": "die Leitzinsen", "pt": "as taxas de juro", "it": "i tassi di interesse"},
    {"en": "border security", "es": "la seguridad fronteriza", "fr": "la sécurité des frontières",
     "de": "die Grenzsicherheit", "pt": "a segurança das fronteiras", "it": "la sicurezza dei confini"},
    {"en": "climate finance", "es": "la financiación climática", "fr": "le financement climatique",
     "de": "die Klimafinanzierung", "pt": "o financiamento climático", "it": "la finanza per il clima"},
    {"en": "refugee aid", "es": "la ayuda a los refugiados", "fr": "l'aide aux réfugiés",
     "de": "die Flüchtlingshilfe", "pt": "a ajuda aos refugiados", "it": "gli aiuti ai rifugiati"},
    {"en": "energy supplies", "es": "el suministro energético", "fr": "l'approvisionnement énergétique",
     "de": "die Energieversorgung", "pt": "o abastecimento de energia", "it": "le forniture energetiche"},
)

# (edition title, edition summary, headline, item summary, source title) per language.
_FRAMES: dict[str, tuple[str, str, str, str, str]] = {
    "en": ("{product} for {date}", "A simulated edition with {n} items from the wire.",
           "{place}: new developments on {topic}",
           ("Officials in {place} reported progress on {topic} on {date}, "
            "according to wire reports."), "Wire report on {topic}"),
    "es": ("{product} del {date}", "Una edición simulada con {n} noticias de agencia.",
           "{place}: novedades sobre {topic}",
           ("Las autoridades de {place} informaron de avances en {topic} "
            "el {date}, según las agencias."), "Despacho sobre {topic}"),
    "fr": ("{product} du {date}", "Une édition simulée de {n} dépêches.",
           "{place} : du nouveau sur {topic}",
           ("Les autorités de {place} ont fait état de progrès sur {topic} "
            "le {date}, selon les agences."), "Dépêche sur {topic}"),
    "de": ("{product} vom {date}", "Eine simulierte Ausgabe mit {n} Agenturmeldungen.",
           "{place}: Neues über {topic}",
           ("Behörden in {place} meldeten am {date} Fortschritte über {topic}, "
            "berichten Agenturen."), "Agenturmeldung über {topic}"),
    "pt": ("{product} de {date}", "Uma edição simulada com {n} notícias de agência.",
           "{place}: novidades sobre {topic}",
           ("Autoridades em {place} relataram avanços sobre {topic} em {date}, "
            "segundo as agências."), "Despacho sobre {topic}"),
    "it": ("{product} del {date}", "Un'edizione simulata con {n} notizie d'agenzia.",
           "{place}: novità su {topic}",
           ("Le autorità di {place} hanno segnalato progressi su {topic} il {date}, "
            "secondo le agenzie."), "Dispaccio su {topic}"),
}


def edition_shape(schema: Any) -> tuple[tuple[str, ...], int]:
    """(languages, items per language) demanded by a `text.format.schema`."""
    if not isinstance(schema, dict):
        return ("en",), _DEFAULT_ITEMS
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    required = schema.get("required")
    langs = tuple(str(x) for x in required) if isinstance(required, list) and required else tuple(props)
    if not langs:
        return ("en",), _DEFAULT_ITEMS
    edition = _resolve(schema, props.get(langs[0], {}))
    items_schema = _resolve(schema, (edition.get("properties") or {}).get("items", {}))
    count = items_schema.get("minItems") or items_schema.get("maxItems") or _DEFAULT_ITEMS
    return langs, int(count) if isinstance(count, int) and count > 0 else _DEFAULT_ITEMS


def generate(schema: Any, *, model: str, slot: str | None, seed: int | None, faults: frozenset[str],
             corrupt_lang: str | None = None, corrupt_domain: str | None = None) -> str:
    """The output text for a finished response (JSON unless a fault says otherwise)."""
    langs, count = edition_shape(schema)
    product, _, date = (slot or "edition/today").partition("/")
    date = date or "today"
    stem = f"{seed}|{model}|{slot}"
    urls = [_sources(stem, i) for i in range(count)]
    picks = [_pick(stem, i) for i in range(count)]
    doc: dict[str, Any] = {}
    for lang in langs:
        source_lang = langs[0] if f.SAME_TEXT in faults else lang
        doc[lang] = _edition(source_lang, product, date, picks, urls)
    if f.SAME_TEXT in faults:
        doc = json.loads(json.dumps(doc))  # independent copies, identical text
    if f.HALLUCINATED_URLS in faults:
        for edition in doc.values():
            for i, item in enumerate(edition["items"]):
                item["sources"][0]["url"] = BAD_URLS[i % len(BAD_URLS)]
    if f.SCRIPT_INJECTION in faults:
        for edition in doc.values():
            edition["items"][0]["headline"] += f" {SCRIPT}"
            edition["items"][0]["sources"][0]["url"] = "javascript:alert(1)"
    if f.SCHEMA_BREAK in faults:
        if len(doc) > 1:
            doc.pop(langs[-1])
        else:
            doc[langs[0]].pop("items")
    if corrupt_lang in doc:
        corrupt(doc[corrupt_lang], corrupt_domain)
    if f.CORRUPT_LANGUAGE in faults and len(langs) > 1:
        corrupt(doc[langs[-1]], None)
    if f.OVERSIZED_OUTPUT in faults:
        filler = "This sentence pads the summary far beyond any sane size. "
        doc[langs[0]]["summary"] = filler * (OVERSIZE_BYTES // len(filler) + 1)
    text = json.dumps(doc, ensure_ascii=False, indent=1)
    if f.MALFORMED_OUTPUT in faults:
        # What a model says when it ignores the format: prose wrapped around broken JSON.
        text = "Here is today's edition as requested:\n" + text[: max(1, len(text) // 3)]
    return text


def corrupt(edition: dict[str, Any], domain: str | None) -> None:
    """One language's sources moved to `domain` (a product whose allowed_domains lacks it refuses
    them), or without one to a host that is never public: that language fails, the others pass."""
    for i, item in enumerate(edition["items"]):
        for j, source in enumerate(item["sources"]):
            source["url"] = f"https://{domain}/simulado-{i}-{j}" if domain else BAD_URLS[(i + j) % len(BAD_URLS)]


def truncate(text: str) -> str:
    """What an `incomplete` (max_output_tokens) response holds: the first half."""
    return text[: max(1, len(text) // 2)]


def _edition(lang: str, product: str, date: str, picks: list[tuple[str, int]], urls: list[list[str]]) -> dict[str, Any]:
    known = lang in _FRAMES
    title, summary, headline, body, source = _FRAMES.get(lang, _FRAMES["en"])
    prefix = "" if known else f"[{lang}] "  # keeps unsupported languages distinct from English

    def topic(i: int) -> str:
        table = _TOPICS[picks[i][1]]
        return table.get(lang, table["en"])

    items = []
    for i, (place, _) in enumerate(picks):
        items.append(
            {
                "headline": prefix + headline.format(place=place, topic=topic(i)),
                "summary": prefix + body.format(place=place, topic=topic(i), date=date),
                "sources": [
                    {"title": prefix + source.format(topic=topic(i)) + f" ({outlet})", "url": url}
                    for outlet, url in zip(("Reuters", "AP"), urls[i], strict=True)
                ],
            }
        )
    return {
        "title": prefix + title.format(product=product, date=date),
        "summary": prefix + summary.format(n=len(picks)),
        "items": items,
    }


def _pick(stem: str, i: int) -> tuple[str, int]:
    h = hashlib.sha256(f"{stem}|pick|{i}".encode()).digest()
    return _PLACES[h[0] % len(_PLACES)], h[1] % len(_TOPICS)


def _sources(stem: str, i: int) -> list[str]:
    h = hashlib.sha256(f"{stem}|url|{i}".encode()).hexdigest()
    return [
        f"https://www.reuters.com/world/simulated-story-{h[:12]}/",
        f"https://apnews.com/article/simulated-{h[12:28]}",
    ]


def _resolve(root: dict[str, Any], node: Any) -> dict[str, Any]:
    """Follow local `$ref`s (`#/$defs/Name`) a few levels deep."""
    for _ in range(8):
        if not isinstance(node, dict):
            return {}
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return node
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        node = target
    return node if isinstance(node, dict) else {}
