"""Hard bounds on the untrusted text of an edition, shared by the edition schema (which
enforces them) and the configuration (which bounds `items` by them) without importing the
schema's validation machinery."""

from __future__ import annotations

MAX_TITLE = 300
MAX_SUMMARY = 4000
MAX_URL = 2048
MAX_SOURCES_PER_ITEM = 8
MAX_ITEMS = 100

# The name the structured output goes by at the provider: part of the request, so of the fingerprint.
SCHEMA_NAME = "iipub_edition"
