"""The ownership rule, pure: whose is a response the provider announced or returned?

A provider's scope is shared (other applications, a staging copy, a second iipub), and its
webhooks announce every response in it. iipub reads, cancels or deletes at the provider only
what it owns:

- a response a job of this database holds (`jobs.response_id`: its own create's answer, or an
  operator's `--link`), without a read;
- a response whose metadata names this installation (`iipub_installation`);
- a response made before installation ids existed (no `iipub_installation`), only when the job
  its metadata names is a job of this database whose row holds that response, or whose charged
  attempts and recorded config fingerprint match the metadata (what only its own create could
  have sent).

Anything else is foreign: nothing is copied, recorded as an orphan, deleted or cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from iipub.model.jobs import Job

METADATA_KEY = "iipub_installation"  # the create metadata key naming the installation


class Owner(Enum):
    OURS = "ours"  # names this installation
    LEGACY = "legacy"  # made before installation ids, provably by this database's create
    FOREIGN = "foreign"


def owner(metadata: Mapping[str, str], installation_id: str, named_job: Job | None, response_id: str) -> Owner:
    """Whose `response_id` is, from its metadata and the job it names (None: no such job here)."""
    claimed = metadata.get(METADATA_KEY)
    if claimed is not None:
        return Owner.OURS if claimed == installation_id else Owner.FOREIGN
    if named_job is None or metadata.get("iipub_job_id") != named_job.id:
        return Owner.FOREIGN
    if named_job.response_id == response_id:
        return Owner.LEGACY
    attempt = metadata.get("iipub_attempt") or ""
    fingerprint = metadata.get("iipub_fingerprint")
    charged = attempt.isdigit() and 1 <= int(attempt) <= named_job.generation_attempts
    if charged and fingerprint is not None and fingerprint == named_job.config_fingerprint:
        return Owner.LEGACY
    return Owner.FOREIGN


def why_foreign(metadata: Mapping[str, str], installation_id: str) -> str:
    claimed = metadata.get(METADATA_KEY)
    if claimed is not None and claimed != installation_id:
        return f"its metadata names installation {claimed[:80]!r}, not this one"
    if "iipub_job_id" not in metadata:
        return "it carries no iipub metadata"
    return "it names no installation and no job of this database that could have made it"
