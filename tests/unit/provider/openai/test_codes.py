"""`provider.openai.codes`: OpenAI's words and what each means in iipub's (`outcomes`)."""

from __future__ import annotations

import pytest

from iipub.provider.openai import codes
from iipub.provider.outcomes import FailureCause, Stage


@pytest.mark.parametrize(("status", "stage"), [
    ("queued", Stage.WAITING), ("in_progress", Stage.RUNNING), ("completed", Stage.FINISHED),
    ("incomplete", Stage.FINISHED), ("failed", Stage.GONE), ("cancelled", Stage.GONE), ("paused", Stage.UNKNOWN),
])
def test_every_documented_status_has_a_stage_and_anything_else_is_unknown(status: str, stage: Stage) -> None:
    assert codes.stage_of(status) is stage
    assert codes.observed("resp_1", status).stage is stage


def test_only_an_incomplete_response_stopped_at_max_output_tokens_is_at_its_cap() -> None:
    assert codes.observed("resp_1", "incomplete", "{", incomplete_reason="max_output_tokens").at_cap
    assert not codes.observed("resp_1", "incomplete", "{", incomplete_reason="content_filter").at_cap
    assert not codes.observed("resp_1", "completed", "{}", incomplete_reason="max_output_tokens").at_cap


@pytest.mark.parametrize(("status", "code", "failure"), [
    ("failed", "server_error", FailureCause.PROVIDER_FAULT),
    ("failed", "invalid_prompt", FailureCause.REFUSAL),
    ("failed", None, FailureCause.REFUSAL),  # unknown or missing: the safer of the two
    ("failed", "mystery_error", FailureCause.REFUSAL),
    ("cancelled", None, None),
    ("completed", None, None),
])
def test_a_failure_says_whether_paying_again_may_help(status: str, code: str | None,
                                                     failure: FailureCause | None) -> None:
    assert codes.observed("resp_1", status, error_code=code).failure is failure


def test_a_scope_is_the_organization_the_project_and_a_fingerprint_of_the_key() -> None:
    scope = codes.scope_of(None, "proj_a", "sk-secret")
    assert "sk-secret" not in scope and "project=proj_a" in scope
    assert codes.same_scope(scope, codes.scope_of(None, "proj_a", "sk-other"))  # the project is the scope
    assert not codes.same_scope(scope, codes.scope_of(None, "proj_b", "sk-secret"))
    keyed = codes.scope_of(None, None, "sk-secret")
    assert not codes.same_scope(keyed, codes.scope_of(None, None, "sk-other"))  # no project: the key is
