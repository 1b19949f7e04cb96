"""`iipub init [--root DIR]`: lay out a host (folders, example configuration, env file,
crontab, systemd units, logrotate) the way README and runbook describe it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import click

from iipub.core.errors import AlreadyInstalled, ConfigError


def _default_executable() -> str:
    """The iipub that runs this command (`/srv/iipub/.venv/bin/iipub init`), else the one on PATH."""
    if sys.argv and os.path.basename(sys.argv[0]) == "iipub" and os.path.isfile(sys.argv[0]):
        return os.path.abspath(sys.argv[0])
    found = shutil.which("iipub")
    return os.path.abspath(found) if found else "/srv/iipub/.venv/bin/iipub"


@click.command("init")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), show_default=True,
              help="Install under this directory instead of / (a staging tree, a drill, a test).")
@click.option("--iipub", "executable", metavar="PATH", default=None,
              help="The iipub executable the crontab and units run (default: this one, found on PATH).")
@click.option("--database-url", metavar="URL", default=None,
              help="IIPUB_DATABASE_URL for the env file (default: a SQLite file in the state folder).")
@click.option("--provider-url", metavar="URL", default=None,
              help="OPENAI_BASE_URL for the env file (e.g. an `iipub simulator` for a staging drill).")
@click.option("--user", "owner", metavar="USER", default=None,
              help="Give the created folders and files to this user (as root; the service user, e.g. iipub).")
def init_command(root: Path, executable: str | None, database_url: str | None, provider_url: str | None,
                 owner: str | None) -> None:
    """Create what the crontab (or the systemd timers) and the logs need, once.

    \b
    Folders: /srv/iipub (configuration, env file, prompts, crontab, monitoring/), its public/
    static root, /var/lib/iipub (the spend ledger; db/ for a SQLite database; report/ for
    `iipub report`'s page, outside the public site), /var/log/iipub,
    /var/lib/node_exporter/textfile_collector. Files: iipub.toml (two products with their
    prompts), env (mode 0600), crontab, /etc/systemd/system/iipub-*.{service,timer} (the
    alternative to the crontab: enable one or the other), /etc/logrotate.d/iipub,
    monitoring/iipub-alerts.yml (Prometheus alert rules) and monitoring/iipub-dashboard.json
    (Grafana).
    Every path is under --root. An existing file is never overwritten: init then writes
    nothing and names what is in the way. Next: put the key in the env file, `iipub
    db migrate` with IIPUB_ENV_FILE=/srv/iipub/env, then `crontab -u iipub /srv/iipub/crontab`.
    """
    from iipub.observe import alert_rules, dashboard, monitoring_files
    from iipub.operate import install

    root = Path(os.path.abspath(root))
    account = install.Account()
    program = executable or _default_executable()
    monitoring = ((alert_rules.FILE_NAME, monitoring_files.alert_rules_text()),
                  (dashboard.FILE_NAME, monitoring_files.dashboard_text()))
    if owner is not None:
        import grp
        import pwd

        try:
            entry = pwd.getpwnam(owner)
        except KeyError:
            raise ConfigError(f"init writes nothing: no user {owner!r} on this host (useradd --system {owner})") \
                from None
        try:
            group = grp.getgrgid(entry.pw_gid).gr_name
        except KeyError:
            group = str(entry.pw_gid)
        account = install.Account(owner, group)
        refused = runnable_by(program, entry.pw_uid, {entry.pw_gid, *os.getgrouplist(owner, entry.pw_gid)})
        if refused is not None:
            raise ConfigError(f"init writes nothing: the crontab would run {program} as {owner}, who cannot: {refused} "
                              "(install iipub where the service user can run it, or pass --iipub PATH)")
    layout, files = install.plan(root, program, database_url, provider_url, account, monitoring)
    present = [f.path for f in files if f.path.exists() or f.path.is_symlink()]
    if present:
        raise AlreadyInstalled(f"init writes nothing: {len(present)} file(s) already there, e.g. {present[0]} "
                               "(move them aside to install again)")
    shared = {layout.systemd, layout.logrotate.parent}
    for folder in layout.folders():
        existed = folder.is_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create folder {folder}: {exc.strerror or exc}") from None
        if not folder.is_dir():
            raise ConfigError(f"cannot create folder {folder}: something else is there")
        if folder in layout.owned_folders() or not (existed or folder in shared):
            _give(folder, owner, account.group)  # never the host's shared ones (/etc/systemd/system)
        click.echo(f"folder  {folder}")
    for f in files:
        try:
            # O_EXCL: a file that appeared since the check is not overwritten either
            fd = os.open(f.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, f.mode)
        except FileExistsError:
            raise AlreadyInstalled(f"{f.path} appeared while init ran; left as it is") from None
        except OSError as exc:
            raise ConfigError(f"cannot write {f.path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f.text)
        os.chmod(f.path, f.mode)  # whatever the umask
        if f.owned:
            _give(f.path, owner, account.group)
        click.echo(f"wrote   {f.path}  {f.what}")
    click.echo(f"next: set OPENAI_API_KEY in {layout.env_file}; `IIPUB_ENV_FILE={layout.env_file} iipub db migrate`; "
               f"then `crontab -u {account.user} {install.cron_word(layout.crontab)}` (or enable the iipub-*.timer "
               "units)")


def runnable_by(program: str, uid: int, gids: set[int]) -> str | None:
    """Why the user (`uid`, `gids`) cannot run `program` (every folder on its way searchable, the
    file executable, and so its `#!` interpreter), or None. Root runs anything executable."""
    seen: set[str] = set()
    todo = [program]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if not os.path.isabs(path):
            return f"{path} is not an absolute path"
        parts = Path(path).parts
        for i in range(1, len(parts)):
            folder = os.path.join(*parts[:i])
            if not os.path.isdir(folder):
                return f"{folder} does not exist"
            if not _may(folder, uid, gids, 0o1):
                return f"{folder} is not searchable by that user"
        real = os.path.realpath(path)
        if real != path:
            todo.append(real)
            continue
        if not os.path.isfile(real):
            return f"{real} does not exist"
        if not _may(real, uid, gids, 0o1) or (uid != 0 and not _may(real, uid, gids, 0o4)):
            return f"{real} is not executable (and readable) by that user"
        with open(real, "rb") as f:
            head = f.read(256)
        if head.startswith(b"#!"):
            interpreter = head[2:].split(b"\n", 1)[0].strip().split()
            if interpreter:
                todo.append(interpreter[0].decode("utf-8", "replace"))
    return None


def _may(path: str, uid: int, gids: set[int], bit: int) -> bool:
    """Whether the user may do `bit` (1 execute/search, 4 read) on `path`, by its mode bits."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if uid == 0:
        return bit != 0o1 or bool(st.st_mode & 0o111) or os.path.isdir(path)
    if st.st_uid == uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid in gids:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


def _give(path: Path, owner: str | None, group: str) -> None:
    if owner is None:
        return
    try:
        shutil.chown(path, owner, group)
    except (LookupError, OSError) as exc:
        raise ConfigError(f"cannot give {path} to {owner}: {exc}") from None
