"""`iipub status [--json] [--check]`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from iipub.cli.common import App, clip, emit_json, json_option, pass_app, table
from iipub.core.errors import CannotWrite, ConfigError, DatabaseUnavailable, SchemaNotReady, UsageError
from iipub.core.severity import Severity
from iipub.core.timefmt import duration
from iipub.core.wording import printable, terminal_safe
from iipub.model.states import State
from iipub.store.db import describe_error
from iipub.store.handles import DatabaseError, OperationalError

if TYPE_CHECKING:
    from iipub.observe.status_report import Status
    from iipub.settings.config import Product

@click.command("status")
@json_option
@click.option("--check", is_flag=True,
              help="Monitoring mode: print one Nagios-style line and exit 0 OK, 1 WARNING, 2 CRITICAL, "
                   "3 UNKNOWN (database unreachable). With --json, print the document and exit likewise.")
@click.option("--prometheus", "prometheus", metavar="PATH", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the figures as Prometheus metrics (node_exporter textfile-collector format) "
                   "to PATH, atomically; the usual output is printed as well. Combines with --json and --check.")
@pass_app
@click.pass_context
def status_command(ctx: click.Context, app: App, as_json: bool, check: bool, prometheus: Path | None) -> None:
    """Counts by state, SLIs from the journal, outbox lag, quarantine, stranded jobs, spend,
    and the heartbeats of the cron commands (the last reconcile and relay runs).

    \b
    --json prints one document with these keys:
      generated_at          database time of the report (ISO 8601 UTC)
      installation_id       this database's installation id (every create's metadata
                            carries it; see README "Ownership")
      other_scope           {jobs, created_under, reads_under}: jobs in flight created under
                            another organization, project or key than reads use now
      product_holds         [{product, param, code, message, job_id, held_at}]: products whose
                            creates wait on a parameter the provider refused
      read_cooldown         {until (null: none), cap_seconds}: a rate limit on a provider read
                            holds polls, custody and cleanup (never creates) until then
      window_hours          the SLI window
      jobs                  {total, by_state, by_product: {product: {state: n}}}
      slis                  {time_to_dispatch, unretrieved_dwell, overdue_polls}, each
                            {count, open, failed, p50_seconds, p99_seconds, max_seconds,
                             slo_seconds, target, within_slo, breached}
      duplicate_publications editions per product/date/language beyond the first
      tracks                the language tracks: {total, by_state, by_lang: {lang:
                             {state: n}}, by_product: {product: {lang: {state: n}}},
                             parked: {count, by_reason, oldest, tracks}, stranded:
                             {count, by_lang, oldest, tracks},
                             duplicate_publications_by_lang: {lang: n}, failing_steps:
                             [tracks whose step failed unexpectedly]}; a track
                            reference is {job_id, product, edition_date, lang, state,
                             age_seconds, reason}
      stranded              {count, after_seconds, oldest, jobs} (a job waiting on a
                             parked track is not stranded: the track is reported)
      outbox                {unpublished, lag_seconds, lag_warn_seconds, lag_crit_seconds,
                             parked, failing, problems}
      editions              {withdrawn, corrected, correcting}: editions an operator
                             took back or corrected, and slots whose paid correction
                             (`correct --regenerate`) is not saved yet (never an alert)
      quarantine            {count, by_reason, oldest, jobs}
      error_budgets         {slo: {target, window_days, events, bad, allowed_bad,
                             budget_left, spent, burn_rates: {5m, 30m, 1h, 6h},
                             fast_burn, slow_burn}}
      change_freeze         {on, slos}: on while an SLO's error budget is spent
      disks                 [{roles, path, free_bytes, size_bytes, free_inodes, inodes,
                             free_ratio, error, filling_bytes_per_hour}]: each
                            filesystem holding the ledger,
                            static root, SQLite database or [status] log_dir
      clock                 {offset_seconds (database - host), uncertainty_seconds}
      queues                the operator's queue by reason: [{kind (quarantine | parked),
                             reason, count, oldest_seconds, critical_after_seconds,
                             overdue, oldest}]
      provider_expired      {current, in_window}
      paid                  spend by PAYMENT time: {counted_by, currency (null without
                             [pricing]), windows: {today, 7d, 30d}, ceilings, overrides};
                            a window is {since, creates, refused, tokens, reported_tokens,
                             estimated_tokens, input_tokens, output_tokens, cost,
                             flex_saving, by_product: {p: ...}, by_tier: {tier: ...}};
                            a ceiling {scope, name, max_tokens_per_day, override_tokens,
                             allowed, counted_today, reached}
      spend                 by edition date: {counted_by, days, rows: [{product,
                             edition_date, input_tokens, output_tokens, total_tokens}], total}
      heartbeats            {after_seconds, recorded, ping_configured, reconcile, relay},
                            each command {last, last_ok, age_seconds (since the last
                            OK run), in_window: {ok, failed, unfinished}, running}; a
                            run is {id, command, host, pid, worker, started_at,
                            finished_at, seconds, ok, summary, error}
      webhooks              {enabled, healthy, last_delivery, outcomes, misses,
                            relaxed_poll_interval_seconds, orphans (awaiting adopt or
                            discard), foreign (deliveries about responses that are not
                            this installation's: left alone)}
      cutover               {days, missing_slots: [{product, edition_date}],
                             shadow_decisions: {action: n}, legacy_decisions_file,
                             legacy_decisions, legacy_problem, differences: [{product,
                             edition_date, action, shadow, legacy}], paused_everything:
                             null or {by, reason, since, unretrieved, first_expiry_seconds}}
      check                 {code, status, line, problems: [{severity, text}]}
    Job references (oldest, jobs) are {id, product, edition_date, state, age_seconds, reason}.
    With --check, an unreachable database prints only {"check": {...}} (status UNKNOWN).

    \b
    --check is CRITICAL when no reconcile (or no relay) run finished OK within
    [monitoring] heartbeat_after_seconds (default 300; 0 turns it off), and WARNING
    "no run recorded yet" on a database that has neither a job nor a run; CRITICAL
    while `pause --everything` holds and responses finish unretrieved, and while a daily spend
    ceiling is reached (naming it); WARNING for a day of the window without a product's slot,
    for shadow decisions that differ from [reconcile] legacy_decisions_file, and after [status]
    unreachable_after_ticks reconcile runs in a row could not connect to the provider.
    Error budgets ([status] error_budget_days, 30): a fast burn (1h and 5m above 14.4x) is
    CRITICAL, a slow one (6h and 30m above 6x) a WARNING; a spent budget adds "change freeze on" to the
    line (no severity of its own).
    Disk headroom: WARNING below [status] disk_warn_free_percent (15) free, CRITICAL below
    disk_crit_free_percent (5) or disk_crit_free_bytes, and when the last day's trend (the
    relay samples every 10 minutes) fills it within disk_full_warn_hours (48) /
    disk_full_crit_hours (6); the host clock more than
    clock_warn_seconds (5) from the database's: WARNING.
    A quarantined job or parked track unreleased past [status] quarantine_critical_after_seconds
    (parked_critical_after_seconds; per reason [status.critical_after_by_reason]) is CRITICAL.
    A parked language track (VALIDATION_FAILED_RETAINED or QUARANTINED) is a WARNING like a
    parked job; a stranded track (unpublished, not parked, its job not parked, past [status]
    stranded_after_seconds since the slot opened) is CRITICAL like a stranded job.
    """
    from iipub.observe import queries

    try:
        report = queries.collect(app.engine(), app.settings)
    except Exception as exc:  # under --check every failure is UNKNOWN, one line (monitoring-plugin rules)
        if not check:
            raise
        unknown(exc, as_json)
        ctx.exit(Severity.UNKNOWN)
        return
    mismatch = app.identity.mismatch() if app.identity is not None else None
    if mismatch is not None:  # the figures are read through another ledger and thresholds than cron's
        report = dataclasses.replace(report, extra_problems=(*report.extra_problems, (Severity.WARNING, mismatch)))
    unwritable = None
    if prometheus is not None:
        try:
            unwritable = _write_metrics(prometheus, report, app.settings.products)
        except Exception as exc:  # not a file problem: under --check UNKNOWN, like any failure
            if not check:
                raise
            unknown(exc, as_json)
            ctx.exit(Severity.UNKNOWN)
            return
        if unwritable is not None and check:  # the check still runs: a WARNING says why the file is stale
            report = dataclasses.replace(report, extra_problems=(*report.extra_problems,
                                                                 (Severity.WARNING, unwritable)))
    code, line = report.check()
    if as_json:
        emit_json(report.to_dict())
    elif check:
        click.echo(line)
    else:
        click.echo(terminal_safe(render(report)))
    if check:
        ctx.exit(code)
    if unwritable is not None:
        raise CannotWrite(unwritable)


def _write_metrics(path: Path, report: Status, products: Mapping[str, Product]) -> str | None:
    """Write the Prometheus textfile; None when done, else the one-line reason it was not."""
    from iipub.observe import metrics  # prometheus_client only for the runs that ask for it

    try:
        metrics.write_textfile(path, report, products)
    except OSError as exc:
        return f"cannot write metrics file {path}: {exc.strerror or exc}"
    return None


def unknown(exc: Exception, as_json: bool) -> None:
    """The one UNKNOWN line (or JSON document) of a check that could not run."""
    if isinstance(exc, UsageError):
        what = str(exc)
    elif isinstance(exc, SchemaNotReady):
        what = f"schema not ready: {exc}"
    elif isinstance(exc, ConfigError):
        what = f"configuration error: {exc}"
    elif isinstance(exc, DatabaseUnavailable):
        what = str(exc) if str(exc).startswith("database") else f"database unreachable: {exc}"
    elif isinstance(exc, OperationalError):
        what = f"database unreachable: {describe_error(exc)}"
    elif isinstance(exc, DatabaseError):
        what = f"database unusable: {describe_error(exc)}"
    else:
        what = f"{type(exc).__name__}: {exc}"
    what = printable(what, 400).replace("|", "/")  # one line, whatever the error said
    sev = Severity.UNKNOWN
    line = f"IIPUB {sev.name} - {what}"
    if as_json:
        emit_json({"check": {"code": sev, "status": sev.name, "line": line,
                             "problems": [{"severity": sev.name, "text": what}]}})
    else:
        click.echo(line)


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.3f}s" if value < 10 else f"{value:.1f}s"
    return duration(value)


def _aligned(rows: list[list[object]]) -> str:
    """Aligned columns without a header line."""
    return table(rows, [""] * len(rows[0])).split("\n", 1)[1]


def _when(value: dt.datetime | None) -> str:
    return value.isoformat(sep=" ", timespec="seconds") + " UTC" if value is not None else "never"


def render(r: Status) -> str:
    """The human report: aligned sections, the same figures as the JSON document."""
    s = r.settings
    out: list[str] = [(f"iipub status at {r.generated_at.isoformat(sep=' ', timespec='seconds')} UTC "
                       f"(SLI window {s.window_hours:g}h)"),
                      f"installation {r.installation_id or 'none (run `iipub db migrate`)'}", ""]

    products = sorted(r.counts)
    states = [state.value for state in State if state.value in r.by_state]
    rows: list[list[object]] = [[state, *[r.counts[p].get(state, 0) for p in products], r.by_state[state]]
                                for state in states]
    rows.append(["TOTAL", *[sum(r.counts[p].values()) for p in products], r.jobs_total])
    out += ["JOBS", table(rows, ["STATE", *products, "TOTAL"]), ""]
    out += _track_lines(r)

    sli_rows = []
    for sli in r.slis:
        share = "-" if sli.share is None else f"{sli.share:.1%}"
        verdict = "BREACH" if sli.breached else "ok"
        sli_rows.append([sli.name, sli.count, sli.open, _secs(sli.percentile(50)), _secs(sli.percentile(99)),
                         f"{sli.target:.0%} < {sli.slo_seconds:g}s", share, verdict])
    out += ["SLIS", table(sli_rows, ["SLI", "COUNT", "OPEN", "P50", "P99", "SLO", "WITHIN", ""]), ""]
    if r.budgets:
        from iipub.observe.error_budget import WINDOWS

        frozen = r.freeze()
        out += [f"ERROR BUDGETS (rolling {s.error_budget_days:g}d; burn rate 1 spends a budget over its window)"
                + (f"; CHANGE FREEZE ON ({', '.join(frozen)})" if frozen else ""),
                table([[b.name, f"{b.target:.0%}", f"{b.window_seconds / 86400:g}d", b.events, b.bad,
                        f"{b.left:.0%}", *(f"{rate:.1f}x" for _, rate in b.burn),
                        "FAST BURN" if b.fast_burn else "slow burn" if b.slow_burn else "SPENT" if b.spent else "ok"]
                       for b in r.budgets],
                      ["SLO", "TARGET", "WINDOW", "EVENTS", "BAD", "LEFT", *(f"BURN {w}" for w, _ in WINDOWS), ""]),
                ""]
    oldest_stranded = r.stranded[0] if r.stranded else None
    out += [_aligned([
        ["duplicate publications", r.duplicate_publications, "SLO 0"],
        ["stranded", len(r.stranded), f"unpublished, not parked, > {duration(s.stranded_after_seconds)} "
         "after the slot opened"
         + (f"; oldest {oldest_stranded.id} {oldest_stranded.state} {duration(oldest_stranded.age_seconds)}"
            if oldest_stranded else "")],
        ["late editions", len(r.late), f"unpublished > {duration(s.late_after_minutes * 60)} after the slot opened"
         + (f"; oldest {r.late[0].id} {r.late[0].state} {duration(r.late[0].age_seconds)}" if r.late else "")],
    ]), ""]

    if r.heartbeats is not None:
        out += _heartbeat_lines(r)

    g = r.gate
    if g is not None:
        breaker_line = "closed" if not g.is_open else (
            f"OPEN ({g.breaker_reason}) since {_when(g.opened_at)}, {g.open_count} opening(s), next probe "
            f"{_when(g.probe_after)}")
        out += ["CREATES", _aligned([
            ["breaker", breaker_line, (g.breaker_detail or "")[:100] if g.is_open else ""],
            ["paused", (f"yes{' (EVERYTHING)' if g.paused_everything else ''}, by {g.paused_by} since "
                        f"{_when(g.paused_at)}") if g.paused else "no", g.paused_reason or "" if g.paused else ""],
            ["last accepted create", _when(g.last_ok_at), ""],
            ["rate-limit cool-down", f"until {_when(g.cooldown_until)}"
             if g.cooldown_until and g.cooldown_until > r.generated_at else "none",
             "creates only: polls and custody go on"],
            ["read cool-down", f"until {_when(r.read_cooldown_until)}" if r.read_cooldown_until else "none",
             "a read was rate-limited: polls, custody and cleanup wait (at most 60s); creates go on"
             if r.read_cooldown_until else ""],
            ["unknown provider statuses", r.unexpected_statuses, f"in {s.window_hours:g}h"],
        ]), ""]

    if r.cutover is not None:
        out += _cutover_lines(r)

    w = r.webhooks
    if w is not None and (w.enabled or w.last is not None or w.orphans or w.foreign):
        last = w.last
        out += ["WEBHOOKS", _aligned([
            ["last verified delivery", _when(last.received_at) if last else "never",
             f"{last.event_type} {last.response_id or ''} -> {last.outcome}" if last else ""],
            ["polling", f"relaxed (safety net every {w.poll_interval_seconds:g}s)"
             if w.enabled and w.health.healthy else "normal", "" if w.enabled else "[webhooks] enabled = false"],
            ["deliveries", sum(w.outcomes.values()),
             f"in {s.window_hours:g}h: " + ", ".join(f"{k} {v}" for k, v in sorted(w.outcomes.items()))],
            ["found by polling first", w.misses, f"in {s.window_hours:g}h"],
            ["orphan responses", w.orphans, "iipub orphans list" if w.orphans else ""],
            ["foreign responses", w.foreign, "deliveries about others' responses, left alone" if w.foreign else ""],
        ]), ""]

    out += ["OUTBOX", _aligned([
        ["unpublished events", r.outbox_unpublished, ""],
        ["lag", f"{r.outbox_lag_seconds:.0f}s",
         f"warn > {s.outbox_lag_warn_seconds:g}s, crit > {s.outbox_lag_crit_seconds:g}s"],
        ["parked deliveries", r.outbox_parked, ""],
        ["failing events", r.outbox_failing, ""],
        *([["withdrawn editions", r.editions_withdrawn, "deliberate: `iipub jobs show ID` says who and why"]]
          if r.editions_withdrawn else []),
        *([["corrected editions", r.editions_corrected, ""]] if r.editions_corrected else []),
        *([["corrections in progress", r.editions_correcting,
            "paid `correct --regenerate`: `iipub jobs show ID` follows it"]] if r.editions_correcting else []),
    ])]
    for p in r.outbox_problems:
        where = p.get("sink") or f"job {p.get('job_id')}"
        out.append(f"  {p.get('kind')}: event {p.get('event_id')} ({where}) since {p.get('since')}: "
                   f"{printable(p.get('error'), 200)}")
    out.append("")

    q_rows: list[list[object]] = [["quarantined", len(r.quarantined),
                                   ", ".join(f"{k}: {v}" for k, v in r.quarantine_reasons.items())]]
    if r.quarantined:
        o = r.quarantined[0]
        q_rows.append(["oldest", o.id, f"{o.reason} {duration(o.age_seconds)}"])
    q_rows.append(["provider expired", r.expired_now, f"now; {r.expired_in_window} in {s.window_hours:g}h"])
    out += ["QUARANTINE", _aligned(q_rows), ""]
    queues = r.queues()
    if queues:
        out += ["OPERATOR QUEUE (by reason; CRITICAL once one waits past its limit)", table(
            [[q.kind, q.reason, q.count, duration(q.oldest_seconds), duration(q.critical_after_seconds),
              q.overdue or "", q.oldest] for q in queues],
            ["QUEUE", "REASON", "DEPTH", "OLDEST", "CRITICAL AFTER", "OVERDUE", "OLDEST ONE"]), ""]

    out += _host_lines(r)
    out += _paid_lines(r)
    spend_rows = [[x.product, x.edition_date, x.input_tokens, x.output_tokens, x.total_tokens] for x in r.spend]
    spend_rows.append(["TOTAL", "", sum(x.input_tokens for x in r.spend), sum(x.output_tokens for x in r.spend),
                       sum(x.total_tokens for x in r.spend)])
    out += [f"SPEND BY EDITION DATE (tokens, editions dated in the last {s.spend_days} days)",
            table(spend_rows, ["PRODUCT", "DATE", "INPUT", "OUTPUT", "TOTAL"]), ""]

    out.append(r.check()[1])
    return "\n".join(out)


def _track_lines(r: Status) -> list[str]:
    """TRACKS: tracks by state per product and language, then the parked and stranded ones
    (nothing when no slot has forked yet)."""
    t = r.tracks
    if t is None or not t.total:
        return []
    columns = [(p, lang) for p, langs in sorted(t.counts.items()) for lang in sorted(langs)]
    states = list(t.by_state)
    rows: list[list[object]] = [[state, *[t.counts[p][lang].get(state, 0) for p, lang in columns],
                                 t.by_state[state]] for state in states]
    rows.append(["TOTAL", *[sum(t.counts[p][lang].values()) for p, lang in columns], t.total])
    lines = ["TRACKS", table(rows, ["STATE", *[f"{p}/{lang}" for p, lang in columns], "TOTAL"])]
    facts: list[list[object]] = [
        ["tracks parked", len(t.parked), ", ".join(f"{k}: {v}" for k, v in t.parked_by_reason().items())],
        ["tracks stranded", len(t.stranded), f"unpublished, not parked, > {duration(r.settings.stranded_after_seconds)}"
         " after the slot opened" + (f"; oldest {t.stranded[0].describe()} {duration(t.stranded[0].age_seconds)}"
                                     if t.stranded else "")],
    ]
    facts.extend(["  parked", f"{o.job_id} {o.lang}", f"{o.state} {duration(o.age_seconds)}: {clip(o.reason, 80)}"]
                 for o in t.parked[:5])
    if t.duplicates_by_lang:
        facts.append(["duplicates by language", sum(t.duplicates_by_lang.values()),
                      ", ".join(f"{k}: {v}" for k, v in t.duplicates_by_lang.items())])
    return [*lines, _aligned(facts), ""]


def _host_lines(r: Status) -> list[str]:
    """HOST: the filesystems iipub writes to and the clock agreement."""
    s = r.settings
    rows: list[list[object]] = [["disk " + "/".join(d.roles), d.path,
                                 d.describe().split(": ", 1)[1] if d.error is None else f"unmeasured: {d.error}"]
                                for d in r.disks]
    c = r.clock_check
    if c is not None:
        rows.append(["clock", f"database - host = {c.offset_seconds:+.3f}s (+-{c.uncertainty_seconds:.3f}s)",
                     f"warn past {s.clock_warn_seconds:g}s"])
    if not rows:
        return []
    return [f"HOST (disk warn < {s.disk_warn_free_percent:g}% free, crit < {s.disk_crit_free_percent:g}%)",
            _aligned(rows), ""]


def _money(value: float | None, currency: str | None) -> str:
    return "-" if value is None or currency is None else f"{value:,.4f} {currency}"


def _paid_lines(r: Status) -> list[str]:
    """Spend by payment time (today, 7 and 30 days; per product and tier), the ceilings and
    the overrides in force."""
    p = r.paid
    if p is None:
        return []
    currency = p.currency if p.priced else None
    rows: list[list[object]] = []
    for w in p.windows:
        groups = [("all", w.total), *((f"product {k}", v) for k, v in sorted(w.by_product.items())),
                  *((f"tier {k}", v) for k, v in sorted(w.by_tier.items()))]
        for label, t in groups:
            rows.append([w.name, label, t.creates, t.refused, f"{t.tokens:,}", f"{t.estimated_tokens:,}",
                         _money(t.cost, currency), _money(t.flex_saving, currency)])
    out = ["SPEND BY PAYMENT TIME (tokens paid for; estimated: usage not reported yet)",
           table(rows, ["WINDOW", "GROUP", "CREATES", "REFUSED", "TOKENS", "ESTIMATED", "COST", "FLEX SAVING"])]
    out.extend(f"  ceiling {'REACHED' if c.reached else 'ok'}: {c.describe()}" for c in p.ceilings)
    for o in p.overrides:
        scope = "global" if o.scope == "*" else f"product {o.scope}"
        out.append(f"  override: {scope} +{o.extra_tokens:,} tokens until {_when(o.until)} by "
                   f"{printable(o.granted_by, 60)}: {printable(o.reason, 200)}")
    return [*out, ""]


def _heartbeat_lines(r: Status) -> list[str]:
    """The last finished run of each cron command: when, how long ago, ok or not, where."""
    b = r.heartbeats
    assert b is not None
    limit = (f"CRITICAL after {duration(b.after_seconds)} without an OK run" if b.after_seconds > 0
             else "check off: [monitoring] heartbeat_after_seconds = 0")
    rows: list[list[object]] = []
    for beat in b.commands:
        counts = (f"in {b.window_hours:g}h: {beat.ok} ok, {beat.failed} failed, {beat.unfinished} unfinished"
                  + (f"; {beat.running} running" if beat.running else ""))
        last = beat.last
        if last is None or last.finished_at is None:
            rows.append([beat.command, "no finished run recorded", "", counts])
            continue
        ago = duration(max(0.0, (r.generated_at - last.finished_at).total_seconds()))
        outcome = "ok" if last.ok else f"FAILED: {(last.error or '?')[:100]}"
        took = f"{last.seconds:.1f}s" if last.seconds is not None else "?"
        ok_line = ""
        if not last.ok:
            ok = beat.last_ok
            ok_line = (f"last OK {_when(ok.finished_at)} on {ok.host}" if ok is not None and ok.finished_at
                       else "no OK run recorded")
        rows.append([beat.command, f"last run {_when(last.finished_at)} ({ago} ago) on {last.host}, {took}: {outcome}",
                     ok_line, counts])
    return [f"CRON RUNS ({limit})", _aligned(rows), ""]


def _cutover_lines(r: Status) -> list[str]:
    """Calendar truth (days without a slot) and, once shadow mode ran or a legacy decisions file
    is configured, the shadow decisions and where they differ from the legacy system's."""
    c = r.cutover
    assert c is not None
    days = f"{c.days[0]} to {c.days[-1]}" if c.days else ""
    missing = ", ".join(f"{p} {d}" for p, d in c.missing[:10]) + (" …" if len(c.missing) > 10 else "")
    rows: list[list[object]] = [["days without a slot", len(c.missing), f"{days}: {missing}" if c.missing else days]]
    if c.shadow_counts or c.legacy_file:
        rows.append(["shadow decisions", sum(c.shadow_counts.values()),
                     ", ".join(f"would {a} {n}" for a, n in sorted(c.shadow_counts.items()))])
    if c.legacy_file:
        rows.append(["legacy decisions", c.legacy_decisions, c.legacy_problem or c.legacy_file])
        rows.append(["differences", len(c.differences), ""])
        rows += [["", "", d.text()] for d in c.differences[:20]]
    return ["CALENDAR AND CUTOVER", _aligned(rows), ""]
