#!/bin/bash
# The install drill (docs/drill.md): a fresh host followed from README "Production" alone, then
# the real Debian cron daemon runs what `iipub init` wrote until today's editions are published.
#
#   bench/drill/cron_drill.sh [MAX_MINUTES]      (as root; Debian's `cron` installed: apt-get install cron)
#
# It stops as soon as every slot of today is published, after MAX_MINUTES (12) at most;
# IIPUB_DRILL_KEEP=1 leaves the temporary root for inspection.
#
# Everything lives under a temporary root: the package's own virtual environment, the folders and
# files `iipub init --root` writes, a SQLite database, the simulator as the provider. cron runs in
# a private mount namespace whose /var/spool/cron/crontabs, /etc/cron.d and /etc/crontab are the
# drill's own (the host's crontabs are neither read nor touched); it is started here and stopped
# by its pid, as is the simulator. Nothing is edited by hand between the steps.
set -euo pipefail

MAX_MINUTES=${1:-12}
CHECKOUT=$(cd "$(dirname "$0")/../.." && pwd)
ROOT=$(mktemp -d /tmp/iipub-drill.XXXXXX)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
CRON_PID=""
SIM_PID=""

say() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }
stop() {
    [ -n "$CRON_PID" ] && kill "$CRON_PID" 2>/dev/null && say "cron (pid $CRON_PID) stopped"
    [ -n "$SIM_PID" ] && kill "$SIM_PID" 2>/dev/null && say "simulator (pid $SIM_PID) stopped"
    return 0
}
trap stop EXIT

command -v cron >/dev/null || { echo "Debian's cron is not installed (apt-get install -y cron)" >&2; exit 2; }
say "drill root $ROOT"

# README step 1: the package in its own virtual environment (this checkout).
VENV=$ROOT/srv/iipub/.venv
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "$CHECKOUT" 2>&1 | grep -v '^WARNING: Location' || true
IIPUB=$VENV/bin/iipub
say "installed: $("$IIPUB" --version)"

# The provider for the drill: the simulator on loopback (any key is accepted).
"$IIPUB" simulator --port "$PORT" >"$ROOT/simulator.log" 2>&1 &
SIM_PID=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/_sim/stats" >/dev/null 2>&1 && break; sleep 0.2; done
say "simulator pid $SIM_PID on 127.0.0.1:$PORT"

# README step 2: iipub init (under the drill's root; its env file points at the simulator).
say "\$ iipub init --root $ROOT --provider-url http://127.0.0.1:$PORT/v1"
"$IIPUB" init --root "$ROOT" --iipub "$IIPUB" --provider-url "http://127.0.0.1:$PORT/v1" | sed "s|$ROOT||g; s|^|    |"
stat -c '    env file mode %a' "$ROOT/srv/iipub/env"

# README step 4: the schema (step 3, the real key and MySQL URL, does not apply to a drill).
IIPUB_ENV_FILE=$ROOT/srv/iipub/env "$IIPUB" db migrate | tail -1 | sed 's/^/    /'

# README step 5: the crontab, installed with `crontab` into the private cron's spool; then cron.
mkdir -p "$ROOT/cron/crontabs" "$ROOT/cron/cron.d"
chmod 1730 "$ROOT/cron/crontabs"
: >"$ROOT/cron/crontab"
unshare --mount --propagation private bash -c "
    mount --bind '$ROOT/cron/crontabs' /var/spool/cron/crontabs
    mount --bind '$ROOT/cron/cron.d' /etc/cron.d
    mount --bind '$ROOT/cron/crontab' /etc/crontab
    crontab -u root '$ROOT/srv/iipub/crontab'
    exec cron -f -L 15" >"$ROOT/cron.log" 2>&1 &
CRON_PID=$!
say "cron pid $CRON_PID (its own mount namespace and crontab; crontab -l:)"
sleep 1
nsenter -t "$CRON_PID" -m crontab -l -u root | grep -E '^[*0-9]' | sed "s|$ROOT||g; s|^|    |"

# Wait, bounded, until every slot of today is published (or the time is up).
DB=$ROOT/var/lib/iipub/db/iipub.sqlite3
deadline=$(( $(date +%s) + MAX_MINUTES * 60 ))
while [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 30
    states=$(python3 - "$DB" <<'EOF'
import sqlite3, sys
try:
    rows = sqlite3.connect(sys.argv[1]).execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
except sqlite3.Error:
    rows = []
print(" ".join(f"{s}={n}" for s, n in rows) or "no jobs yet")
EOF
)
    say "jobs: $states"
    case "$states" in
        *NO_JOB*|*CREATE*|*ACCEPTED*|*QUEUED*|*IN_PROGRESS*|*RETRIEVED*|*VALIDAT*|*COMPOS*|*SAVED*|"no jobs yet") ;;
        *) break ;;
    esac
done
stop
CRON_PID=""
SIM_PID=""

say "cron runs recorded:"
python3 - "$DB" <<'EOF' | sed 's/^/    /'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
for command, ok, n in con.execute("SELECT command, ok, COUNT(*) FROM runs GROUP BY command, ok ORDER BY command"):
    print(f"{command}: {n} run(s) {'ok' if ok else 'FAILED' if ok is not None else 'unfinished'}")
for product, day, lang in con.execute("SELECT product, edition_date, lang FROM editions ORDER BY product, lang"):
    print(f"edition {product} {day} {lang}")
EOF
say "published files:"
(cd "$ROOT/srv/iipub/public" && find . -path '*/20??-??-??/*.html' | sort | sed 's|^\./|    /srv/iipub/public/|')
say "cron logs: every line one JSON event with time and level; each run's summary once (tick_done / relay_done):"
for f in "$ROOT"/var/log/iipub/*.log; do
    printf '    %s: %s lines, %s run summaries, %s lines that are not JSON\n' "$(basename "$f")" "$(wc -l <"$f")" \
        "$(grep -c -E '"(tick|relay)_done"' "$f" || true)" "$(grep -vc '^{' "$f" || true)"
done
say "status --check (as cron runs it):"
env -i HOME="$ROOT" LOGNAME=root SHELL=/bin/sh PATH=/usr/bin:/bin IIPUB_ENV_FILE="$ROOT/srv/iipub/env" \
    sh -c "cd $ROOT/srv/iipub && $IIPUB status --check" | sed "s|$ROOT||g; s/^/    /" || true
if [ "${IIPUB_DRILL_KEEP:-0}" = 1 ]; then say "drill root left for inspection: $ROOT"; else rm -rf "$ROOT"; fi
