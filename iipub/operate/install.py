"""What `iipub init` installs on a host: the folders and the text of every file (example
configuration with its prompts, environment file, crontab, systemd units, logrotate), as values.

Pure: `plan` says where each thing goes under a root and what it holds; the command writes it.
`crontab.example` at the top of the repository is `plan(Path("/")).crontab` word for word
(a test holds them together), so the example an operator reads is the one that works.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_EXECUTABLE = "/srv/iipub/.venv/bin/iipub"
SERVICE_USER = "iipub"


@dataclass(frozen=True)
class Account:
    """Who the generated files run iipub as (`iipub init --user`): logrotate's `su`, systemd's
    `User=`/`Group=`, the crontab's `crontab -u`."""

    user: str = SERVICE_USER
    group: str = SERVICE_USER


def cron_word(value: object) -> str:
    """A word of a crontab command line: quoted for /bin/sh, and `%` (a newline to cron) escaped."""
    return shlex.quote(str(value)).replace("%", "\\%")


def unit_word(value: object) -> str:
    """A word of a systemd unit setting: double-quoted when it holds blanks or quotes, `%` doubled
    (systemd's specifiers)."""
    text = str(value).replace("%", "%%")
    if any(c.isspace() or c in "\"'\\" for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def logrotate_word(value: object) -> str:
    """A path in a logrotate stanza's header: double-quoted when it holds blanks."""
    text = str(value)
    return f'"{text}"' if any(c.isspace() for c in text) else text

# The example products: the built-in two, with their prompts in files an operator edits.
_PROMPTS = {
    "daily-brief": (
        "Write today's Daily Brief of international affairs: 14 items, each with a headline, a short\n"
        "factual summary and at least one source link to a reputable outlet. Produce the edition in\n"
        "every requested language; translations must be written for native readers, not copied.\n"),
    "revolution-watch": (
        "Write today's Revolution Watch: 8 items on political unrest, protest movements and regime\n"
        "change around the world, each with a headline, a short factual summary and at least one\n"
        "source link. Produce the edition in every requested language.\n"),
}


@dataclass(frozen=True)
class Layout:
    """Where an installation's parts live, every path under `root` ("/" on a real host)."""

    root: Path

    def _at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def home(self) -> Path:  # the working directory of every cron line: configuration, env, prompts
        return self._at("/srv/iipub")

    @property
    def config(self) -> Path:
        return self.home / "iipub.toml"

    @property
    def env_file(self) -> Path:
        return self.home / "env"

    @property
    def prompts(self) -> Path:
        return self.home / "prompts"

    @property
    def static_root(self) -> Path:  # served by the web server; nothing private may live under it
        return self.home / "public"

    @property
    def state(self) -> Path:  # the spend ledger and, with SQLite, the database (in its own folder)
        return self._at("/var/lib/iipub")

    @property
    def ledger(self) -> Path:
        return self.state / "spend-ledger.jsonl"

    @property
    def sqlite_dir(self) -> Path:  # apart from the ledger: a copy of the database's folder must not take it
        return self.state / "db"

    @property
    def logs(self) -> Path:
        return self._at("/var/log/iipub")

    @property
    def textfile_dir(self) -> Path:  # node_exporter's textfile collector
        return self._at("/var/lib/node_exporter/textfile_collector")

    @property
    def crontab(self) -> Path:
        return self.home / "crontab"

    @property
    def monitoring(self) -> Path:  # the Prometheus alert rules and the Grafana dashboard, to load from here
        return self.home / "monitoring"

    @property
    def reports(self) -> Path:  # `iipub report`'s page: outside the public site (it shows spend and quarantines)
        return self.state / "report"

    @property
    def systemd(self) -> Path:
        return self._at("/etc/systemd/system")

    @property
    def logrotate(self) -> Path:
        return self._at("/etc/logrotate.d/iipub")

    def owned_folders(self) -> tuple[Path, ...]:
        """The folders the service user owns (it writes in each)."""
        return (self.home, self.prompts, self.static_root, self.state, self.sqlite_dir, self.logs, self.monitoring,
                self.reports)

    def folders(self) -> tuple[Path, ...]:
        """Every folder init makes sure of, the host's shared ones last."""
        return (*self.owned_folders(), self.textfile_dir, self.systemd, self.logrotate.parent)

    def default_database_url(self) -> str:
        return f"sqlite:///{self.sqlite_dir / 'iipub.sqlite3'}"


_MONITORING_WHAT = {".yml": "Prometheus alert rules: add to rule_files in prometheus.yml",
                    ".json": "Grafana dashboard: import it (Dashboards, New, Import)"}


@dataclass(frozen=True)
class InstallFile:
    path: Path
    text: str
    mode: int = 0o644
    what: str = ""
    owned: bool = True  # given to the service user (systemd units and logrotate stay root's)


# The cron lines: (schedule, iipub arguments, how output is kept, timeout). One definition for
# the crontab and the systemd units.
@dataclass(frozen=True)
class CronJob:
    name: str
    schedule: str
    calendar: str  # the same schedule as a systemd OnCalendar=
    args: str
    timeout: str
    comment: str


def cron_jobs(layout: Layout) -> tuple[CronJob, ...]:
    prom = layout.textfile_dir / "iipub.prom"
    return (
        CronJob("reconcile", "* * * * *", "*-*-* *:*:00", "reconcile", "-k 5 58",
                "The cron command: advance every due job as far as is safe."),
        CronJob("relay", "* * * * *", "*-*-* *:*:00", "relay", "-k 5 58",
                "Deliver saved editions to the static site / webhook, exactly once."),
        CronJob("prometheus", "* * * * *", "*-*-* *:*:00", f"status --prometheus {shlex.quote(str(prom))}", "50",
                "Prometheus: the same figures for node_exporter's textfile collector (written atomically)."),
        CronJob("prune", "17 3 * * *", "*-*-* 03:17:00", "relay --prune", "600",
                "Housekeeping: prune published outbox rows older than relay.prune_after_days."),
        CronJob("report", "7 * * * *", "*-*-* *:07:00",
                f"report --days 30 --html {shlex.quote(str(layout.reports / 'index.html'))}",
                "300", "A page to look at: the last 30 days as charts (runbook.md, \"What to look at\")."),
    )


def render_crontab(layout: Layout, executable: str, account: Account = Account()) -> str:
    home, logs = cron_word(layout.home), layout.logs
    reconcile, relay, prom, prune, report = cron_jobs(layout)

    def words(job: CronJob) -> str:
        return " ".join(cron_word(a) for a in shlex.split(job.args))

    def line(job: CronJob, log: str) -> str:
        return f'{job.schedule} cd {home} && timeout {job.timeout} "$IIPUB" {words(job)} >>{cron_word(logs / log)} 2>&1'

    last = cron_word(logs / "status.last")
    textfile, status_log = cron_word(layout.textfile_dir / "iipub.prom"), cron_word(logs / "status.log")
    install = f"crontab -u {account.user} {cron_word(layout.crontab)}"
    return f"""\
# iipub on a modest host, as `iipub init` writes it: install with `{install}`.
# Every job runs under `timeout` so no tick outlives its minute; each command is bounded on its
# own (reconcile/relay stop taking new work after 50 s), `timeout` is the backstop.
# Each run writes one JSON line to its log (the run's summary with time and level; errors too):
# a command whose stdout and stderr are the same file leaves its stdout summary out.
SHELL=/bin/sh
PATH=/usr/local/bin:/usr/bin:/bin
IIPUB={executable}
# Settings and secrets live in one file (mode 0600, owner {account.user}; see env.example): every iipub
# command reads it, so every line below gets IIPUB_DATABASE_URL, IIPUB_CONFIG, OPENAI_API_KEY and
# IIPUB_WEBHOOK_SECRET. Its lines are KEY=value or export KEY=value; a variable set here or in the
# command's environment wins over the file. The webhook receiver reads the same file (runbook.md).
IIPUB_ENV_FILE={layout.env_file}

# {reconcile.comment}
# `58` is [reconcile] wrapper_seconds (its default): a create starts only while it can finish before
# the TERM (runbook.md, "No create the wrapper could kill"); change both together.
{line(reconcile, "reconcile.log")}
# One process polls 10,000 in-flight jobs inside a minute with reconcile.concurrency = 64 and
# provider.max_connections = 64 (about 37 s on 2 cores, docs/benchmarks.md). On a busy host or past
# that, a second line adds a process; leases keep the two apart:
# {line(reconcile, "reconcile.log")}

# {relay.comment}
{line(relay, "relay.log")}

# Alerting: exit 1 = WARN, 2 = CRIT, 3 = UNKNOWN. Cron mails any output, so print only when not OK
# (or point your monitoring agent at the same command).
*/5 * * * * cd {home} && timeout 50 "$IIPUB" status --check >{last} 2>&1 || cat {last}
# It is CRITICAL when no reconcile (or relay) run finished OK within [monitoring] heartbeat_after_seconds.
# This host watching itself misses a dead host or crond: set [monitoring] ping_url (dead-man's-switch,
# e.g. https://checks.example.org/ping/KEY/iipub-{{command}}) and every successful run pings it from here.

# {prom.comment}
{prom.schedule} cd {home} && timeout {prom.timeout} "$IIPUB" status --prometheus {textfile} >/dev/null 2>>{status_log}

# {prune.comment}
{line(prune, "relay.log")}

# {report.comment}
# Serve {cron_word(layout.reports)} to operators only (never under {cron_word(layout.static_root)}):
# it names spend and quarantines.
{report.schedule} cd {home} && timeout {report.timeout} "$IIPUB" {words(report)} >/dev/null 2>>{status_log}

# {layout.logrotate} rotates {logs}/*.log (copytruncate), daily, keeping 14.
"""


def _toml(path: Path) -> str:
    """A path as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(str(path))


def render_config(layout: Layout) -> str:
    return f"""\
# iipub's configuration, as `iipub init` wrote it (PRODUCT.md section 3; README "Configuration").
# Relative paths are read from this file's folder. Editing this file is a configuration change:
# the next run records its new fingerprint in the journal (runbook.md "Configuration identity").

[reconcile]
lease_seconds = 60
tick_seconds = 50          # stop taking new work after this (cron's `timeout` kills at 58 s)

[sinks.static]
root = {_toml(layout.static_root)}

[ledger]
path = {_toml(layout.ledger)}   # outside the public tree; keep it on the host's backups

[status]
log_dir = {_toml(layout.logs)}   # its disk is watched with the ledger's, the site's and the database's
# disk_warn_free_percent = 15                   # free space below this: WARNING ...
# disk_crit_free_percent = 5                    # ... below this: CRITICAL
# clock_warn_seconds = 5                        # host clock vs database clock: WARNING
# quarantine_critical_after_seconds = 14400     # a quarantined job unreleased this long: CRITICAL
# parked_critical_after_seconds = 28800         # a parked track unreleased this long: CRITICAL
# error_budget_days = 30                        # each SLO's error budget window

[[products]]
name = "daily-brief"
languages = ["en", "es"]
opens_at = "05:00"         # UTC time the slot becomes eligible
model = "gpt-5-mini"
reasoning_effort = "low"   # GPT-5 models take no temperature; effort and verbosity instead
prompt_file = "prompts/daily-brief.md"
items = 14
priority = 10

[[products]]
name = "revolution-watch"
languages = ["en", "es"]
opens_at = "06:00"
model = "gpt-5-mini"
reasoning_effort = "low"
prompt_file = "prompts/revolution-watch.md"
items = 8
priority = 20
"""


def render_env(layout: Layout, database_url: str | None, provider_url: str | None,
               account: Account = Account()) -> str:
    url = database_url or layout.default_database_url()
    base = f"OPENAI_BASE_URL={provider_url}" if provider_url else "# OPENAI_BASE_URL=http://127.0.0.1:8765/v1"
    return f"""\
# {layout.env_file}: the settings and secrets of every iipub command on this host (cron reads it
# through IIPUB_ENV_FILE in the crontab; systemd through Environment=IIPUB_ENV_FILE; the webhook
# receiver through webhook.wsgi, see runbook.md). Mode 0600, owner {account.user}; keep it out of the web
# root and out of version control. One KEY=value per line; `export KEY=value` works too, so
# `set -a; . {layout.env_file}; set +a` loads it into a shell. '…' is taken literally.
# Production: IIPUB_DATABASE_URL=mysql+pymysql://iipub:PASSWORD@127.0.0.1/iipub
IIPUB_DATABASE_URL={shlex.quote(url)}
IIPUB_CONFIG={shlex.quote(str(layout.config))}
# The provider's key: replace the placeholder before the first reconcile run.
OPENAI_API_KEY=sk-CHANGE-ME
{base}
# the webhook sink's signing secret, if a webhook sink is configured (its secret_env)
# IIPUB_WEBHOOK_SECRET=whsec_CHANGE-ME
# the provider's webhooks, for the receiver (iipub webhook serve / iipub.webhook:application)
# OPENAI_WEBHOOK_SECRET=whsec_CHANGE-ME
# IIPUB_LOG_LEVEL=info
# IIPUB_LOG_FORMAT=json
"""


def render_units(layout: Layout, executable: str, account: Account = Account()) -> list[InstallFile]:
    """A oneshot service and a timer per cron line: the alternative to the crontab (use one)."""
    files = []
    for job in cron_jobs(layout):
        seconds = job.timeout.split()[-1]
        log = {"reconcile": "reconcile.log", "relay": "relay.log", "prune": "relay.log"}.get(job.name, "status.log")
        files.append(InstallFile(layout.systemd / f"iipub-{job.name}.service", f"""\
[Unit]
Description=iipub {job.args} ({job.comment.rstrip('.')})
After=network-online.target

[Service]
Type=oneshot
User={account.user}
Group={account.group}
WorkingDirectory={str(layout.home).replace("%", "%%")}
Environment={unit_word(f"IIPUB_ENV_FILE={layout.env_file}")}
ExecStart={unit_word(executable)} {" ".join(unit_word(a) for a in shlex.split(job.args))}
TimeoutStartSec={seconds}
KillSignal=SIGTERM
# one JSON line per run in the log, like the crontab's: the stdout summary is left out
StandardOutput=null
StandardError=append:{str(layout.logs / log).replace("%", "%%")}
""", what=f"systemd service for `iipub {job.args}`", owned=False))
        files.append(InstallFile(layout.systemd / f"iipub-{job.name}.timer", f"""\
[Unit]
Description=iipub {job.args} on schedule ({job.schedule} in cron's words)

[Timer]
OnCalendar={job.calendar}
AccuracySec=1s
Persistent=false

[Install]
WantedBy=timers.target
""", what=f"systemd timer for `iipub {job.args}`", owned=False))
    return files


def render_logrotate(layout: Layout, account: Account = Account()) -> str:
    return f"""\
# iipub's cron logs, as `iipub init` wrote it.
{logrotate_word(f"{layout.logs}/*.log")} {{
    daily
    rotate 14
    compress
    delaycompress
    missingok
    notifempty
    copytruncate
    su {account.user} {account.group}
}}
"""


def plan(root: Path, executable: str = DEFAULT_EXECUTABLE, database_url: str | None = None,
         provider_url: str | None = None, account: Account = Account(),
         monitoring: Sequence[tuple[str, str]] = ()) -> tuple[Layout, list[InstallFile]]:
    """The layout under `root` and every file `iipub init` writes there, run as `account`;
    `monitoring` is the package's alert rules and dashboard as (file name, text), written to the
    monitoring folder."""
    layout = Layout(root)
    files = [
        InstallFile(layout.config, render_config(layout), what="configuration (two products, prompts in files)"),
        *(InstallFile(layout.prompts / f"{name}.md", text, what=f"prompt of {name}")
          for name, text in _PROMPTS.items()),
        InstallFile(layout.env_file, render_env(layout, database_url, provider_url, account), mode=0o600,
                    what="settings and secrets (mode 0600): replace OPENAI_API_KEY"),
        InstallFile(layout.crontab, render_crontab(layout, executable, account),
                    what=f"crontab: install with `crontab -u {account.user} {cron_word(layout.crontab)}`"),
        *render_units(layout, executable, account),
        InstallFile(layout.logrotate, render_logrotate(layout, account), what="logrotate for the cron logs",
                    owned=False),
        *(InstallFile(layout.monitoring / name, text, what=_MONITORING_WHAT.get(Path(name).suffix, "monitoring"))
          for name, text in monitoring),
    ]
    return layout, files
