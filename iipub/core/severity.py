"""How bad a finding is, as monitoring plugins number it. Pure.

Every check iipub makes for `status --check` (heartbeats, the cutover, burn alerts, escalation,
disk and clock, the create gate) rates its problems with this one type: the most severe problem
is the check's exit code, and a member's name is the word the check line and the JSON say.
"""

from __future__ import annotations

import enum


class Severity(enum.IntEnum):
    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3  # the check could not run (the database unreachable, a bad configuration, a bug)
