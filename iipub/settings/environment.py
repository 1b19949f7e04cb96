"""The environment variables the settings are read from, by name, pure: it loads nothing, so the
wake-up check (`observe.idle_check`) reads them before anything else of iipub loads. The provider's
credentials and address are the deployment's `OPENAI_*` variables."""

from __future__ import annotations

DATABASE_URL = "IIPUB_DATABASE_URL"
CONFIG = "IIPUB_CONFIG"
API_KEY = "OPENAI_API_KEY"
WEBHOOK_SECRET = "OPENAI_WEBHOOK_SECRET"
BASE_URL = "OPENAI_BASE_URL"
ORGANIZATION = "OPENAI_ORG_ID"
PROJECT = "OPENAI_PROJECT_ID"
# Every variable a run's settings may come from begins with one of these.
PREFIXES = ("IIPUB_", "OPENAI_")
