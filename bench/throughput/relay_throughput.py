"""Relay throughput to the static sink, against the size of the archive already published
(E editions per product and language): one timed `relay.run` over M new slots' events, split
between the sink's file work and the relay's database work. A flat cost per event from E = 25
to E = 10,000 is the point. Set-up: bench/notes/relay_throughput.md.

    .venv/bin/python bench/throughput/relay_throughput.py [--mysql URL] [--quick] [--editions 25,1000,10000] \
        [--slots 50]
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))  # bench/support: the shared modules
import benchdb
import harness
import reporting
import simproc
from iipub.edition.compose import canonical_json
from iipub.edition.paths import json_path
from iipub.model.states import State
from iipub.publish import relay
from iipub.publish.relay import build_sinks
from iipub.publish.sinks import EditionEvent, PublishResult, Sink
from iipub.publish.sinks.manifest import Manifest
from iipub.publish.sinks.site import Entry
from iipub.publish.sinks.static import StaticSink
from iipub.settings.config import Settings
from iipub.store import tables


class TimedSink:
    """Delegates to a real sink and adds up the time spent in `deliver`."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.calls = 0

    def publish(self, event: EditionEvent) -> PublishResult:
        t0 = time.perf_counter()
        try:
            return self.inner.publish(event)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def relay_sections(m: int) -> dict[str, dict[str, Any]]:
    return {"reconcile": {"poll_interval_seconds": 0.0, "tick_seconds": 3600.0, "max_in_flight": max(m, 1)},
            "relay": {"tick_seconds": 3600.0},
            "monitoring": {"heartbeat_after_seconds": 0.0}}  # off: a one-hour tick is longer than any heartbeat


def _artifact_doc(product: str, day: dt.date, lang: str, items: int) -> dict[str, Any]:
    """An artifact document of the shape compose() makes (every source URL distinct, so the
    deduplicated `sources` list is simply every item's)."""
    its = [{"headline": f"Archive headline {i} {lang} {day}",
            "summary": f"A seeded summary of item {i} for {day}, long enough to look like one. " * 2,
            "sources": [{"title": "Reuters", "url": f"https://www.reuters.com/world/{day}/{lang}/{i}"}]}
           for i in range(items)]
    return {"product": product, "edition_date": day.isoformat(), "lang": lang,
            "title": f"Archive {product} {lang} {day}", "summary": f"The world on {day}.",
            "items": its, "sources": [s for it in its for s in it["sources"]]}


def seed_archive(settings: Settings, per_index: int, before: dt.date, template: Path) -> float:
    """`per_index` published editions per product and language on the days before `before`, in
    `template` (a public root and its state directory beside it, as a sink of this version
    leaves them: each edition's JSON in the public tree and its manifest entry; the pages are
    rendered when a delivery needs them). The manifest names `settings`' root, where each run
    gets a hard-linked copy (`copy_archive`). Returns seconds."""
    t0 = time.perf_counter()
    assert settings.static_sink is not None
    sink = build_sinks(settings)[0]
    assert isinstance(sink, StaticSink)
    root, state = template / "public", template / ".iipub-state" / "public"
    entries: list[tuple[str, str, Entry]] = []
    for p in settings.products.values():
        for k in range(per_index):
            day = before - dt.timedelta(days=k + 1)
            os.makedirs(root / p.name / day.isoformat(), exist_ok=True)
            for lang in p.languages:
                body = canonical_json(_artifact_doc(p.name, day, lang, p.items))
                (root / json_path(p.name, day.isoformat(), lang)).write_bytes(body)
                entries.append((p.name, lang, Entry(day.isoformat(), f"Archive {p.name} {lang} {day}",
                                                    hashlib.sha256(body).hexdigest(), f"{day}T06:00:00Z")))
        for lang in p.languages:
            os.makedirs(root / p.name / lang, exist_ok=True)
    (state / "tmp").mkdir(parents=True, exist_ok=True)

    def write(path: Path, data: bytes) -> bool:
        path.write_bytes(data)
        return True

    manifest = Manifest.create(state, os.path.abspath(sink.root), write, entries)
    manifest.set_render(sink.site.fingerprint())  # as if this version had rendered it
    os.sync()  # on disk before any measurement, whose fsyncs would otherwise flush the seed
    return time.perf_counter() - t0


def copy_archive(template: Path, root: Path) -> None:
    """The seeded archive at `root` (a new directory; its state beside it), hard-linked: the sink
    replaces files by renaming new ones into place, so the template is never changed."""
    root.parent.mkdir(parents=True)
    shutil.copytree(template / "public", root, copy_function=os.link)
    shutil.copytree(template / ".iipub-state", root.parent / ".iipub-state", copy_function=os.link)
    os.sync()


def first_new_day(settings: Settings, m: int) -> dt.date:
    """The oldest of the M backfill slots: they end two days before today (UTC, as the database
    clock has it) and go back M / products days."""
    return dt.datetime.now(dt.UTC).date() - dt.timedelta(days=2 + m // len(settings.products))


def measure(base_url: str, m: int, template: Path, work: Path) -> dict[str, Any]:
    with simproc.SimProc(latency_seconds=0.0, queued_seconds=0.5, in_progress_seconds=1.0) as sim, \
            harness.bed(base_url, "relay", sim, pool_size=20, sections=relay_sections(m), workdir=work,
                        count_trips=True) as bed:
        engine, settings, counter = bed.engine, bed.settings, bed.trips
        assert counter is not None
        t0 = time.perf_counter()
        copy_archive(template, work / "public")
        seed = time.perf_counter() - t0
        t0 = time.perf_counter()
        # M slots in SAVED_NOT_PUBLIC with their outbox events (reconcile only, no relay).
        benchdb.schedule_backfill(engine, settings, m)
        benchdb.drive(settings, engine, sim, lambda c: c.get(State.SAVED_NOT_PUBLIC.value, 0) == m,
                      relay_too=False, max_loops=10)
        prep = time.perf_counter() - t0
        events = benchdb.count_rows(engine, tables.outbox)
        timed = [TimedSink(s) for s in build_sinks(settings)]
        sinks: list[Sink] = list(timed)
        counter.reset()
        t0 = time.perf_counter()
        report = relay.run(settings, engine, sinks=sinks)
        wall = time.perf_counter() - t0
        rt = counter.snapshot()
        published = benchdb.count_rows(engine, tables.outbox, tables.outbox.c.published_at.is_not(None))
    if published != events or report.jobs_published != m:
        print(f"  !! M={m}: {published}/{events} events published, {report.jobs_published} jobs")
    sink_s = sum(s.seconds for s in timed)
    return {
        "seed": seed, "prep": prep, "wall": wall, "events": published, "rate": published / wall,
        "ms_per_event": wall / max(published, 1) * 1000, "sink_share": sink_s / wall,
        "sink_ms": sink_s / max(published, 1) * 1000,
        "db_ms": (wall - sink_s) / max(published, 1) * 1000,
        "stmts_per_event": rt["statement_total"] / max(published, 1),
        "wire_per_event": rt["wire_total"] / max(published, 1) if rt["wire_total"] else float("nan"),
    }


def main() -> None:
    ap = harness.parser(__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=None, help="M new slots per run (default 50; --quick 20)")
    ap.add_argument("--editions", default=None,
                    help="comma-separated E values, editions per product and language already published "
                         "(default 25,1000,10000; --quick 25,1000)")
    run = harness.start(ap)
    args = run.args
    m = args.slots or (20 if args.quick else 50)
    sizes = [int(x) for x in (args.editions or ("25,1000" if args.quick else "25,1000,10000")).split(",")]
    runs = args.runs or (1 if args.quick else 3)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        seeded = {}
        for e in sizes:
            # Every run's root has the same path (the manifest names it); each run gets its own
            # copy, and the copies are removed at the end (not between measurements).
            work = base / f"run-{e}"
            shape = benchdb.bench_settings(args.mysql, "http://127.0.0.1:9/v1", work / "public", **relay_sections(m))
            seeded[e] = seed_archive(shape, e, first_new_day(shape, m), base / f"seed-{e}")
            print(f"E={e}: {4 * e:,} editions seeded in {seeded[e]:.1f} s", flush=True)

        def one_run(e: int) -> dict[str, Any]:
            work = base / f"run-{e}"
            if work.exists():  # the previous run's: out of the way, deleted with the rest at the end
                work.rename(Path(tempfile.mkdtemp(dir=base)) / "done")
            return measure(args.mysql, m, base / f"seed-{e}", work)

        # Sizes interleaved, so a busy spell of a shared host does not land on one size.
        results = harness.grid(runs, sizes, one_run)
    head = run.header(f"{runs} per E (median, min–max)")
    seeded_text = ", ".join(f"{4 * e:,} editions in {seeded[e]:.1f} s" for e in sizes)
    rows = []
    for e, xs in results.items():
        rows.append([
            f"{e:,}", f"{e + m // 2:,}", f"{reporting.median(x['events'] for x in xs):.0f}", str(len(xs)),
            reporting.spread([x["wall"] for x in xs], 2), reporting.spread([x["rate"] for x in xs]),
            reporting.spread([x["ms_per_event"] for x in xs]),
            f"{reporting.median(x['sink_ms'] for x in xs):.1f} / {reporting.median(x['db_ms'] for x in xs):.1f}",
            (f"{reporting.median(x['stmts_per_event'] for x in xs):.1f} / "
             f"{reporting.median(x['wire_per_event'] for x in xs):.1f}"),
        ])
    body = f"""{head}
{harness.note("relay_throughput", seeded=seeded_text, m=m)}
{reporting.table(["E editions per index (seeded)", "per index (end)", "events", "runs", "relay wall s",
                  "events/s", "ms per event", "sink ms / db+other ms per event",
                  "SQL stmts / wire round trips per event"], rows)}
"""
    run.write_section("relay_throughput", "5. Relay throughput (static sink)", body)


if __name__ == "__main__":
    main()
