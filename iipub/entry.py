"""The `iipub` console script: the wake-up check first (`idle_check`, the driver alone), then,
unless it answered an idle cron run, the command line."""

from __future__ import annotations

import sys


def main() -> None:
    from iipub.observe.idle_check import run

    if run(sys.argv[1:]) == 0:
        sys.exit(0)
    from iipub.cli import main as cli_main

    cli_main()
