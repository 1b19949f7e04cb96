"""The config fingerprint is iipub's own canonical document: pinned values that only a change of
what shapes a generation may move, never a library upgrade; jobs recorded under version 1 keep
matching after the upgrades to versions 2 and 3."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from dataclasses import replace

import pytest

from iipub.machine import decisions
from iipub.model.jobs import Job, slot_row
from iipub.model.states import Reason, State
from iipub.settings import edition_limits, edition_schema, fingerprint
from iipub.settings.config import Product, default_products

# Changing one of these is a deliberate act: every job in flight under the old value would be
# quarantined `config_drift` unless `fingerprint.matches` still accepts it.
PINNED = {
    "daily-brief": "fcfdda3cd84020c79d10fde49ada0b4bf48d0336f4db17d2ab2f290a184bd485",
    "revolution-watch": "584870d247aa5f323538b319e59fd1d1727bdb2ba3462fde8e9d5f611ed378dc",
}
# The same products' version-2 values, as jobs recorded them before version 3 (temperature 0.2
# hashed, and sent, always).
PINNED_V2 = {
    "daily-brief": "d7e139a35efbc2064e441002dcec99e3454a7eff2ac9d762ef5851fb4a836d2d",
    "revolution-watch": "fe867abd4daefec58cf6a81b684ded0202ede98107cc94e6b77dfa101822ebd3",
}
# The same products' version-1 values, as jobs recorded them before version 2.
PINNED_V1 = {
    "daily-brief": "4dd5f195baec3c57ca3d80254f946b218bc98b9020caee87aa3d962e8e5ac85a",
    "revolution-watch": "7c600fb99f2d35f99871eeda112fa28df021e158a6d20cf27a1c0160ecbe514f",
}


def test_default_products_fingerprints_are_pinned() -> None:
    assert {name: p.fingerprint() for name, p in default_products().items()} == PINNED


def test_a_job_recorded_under_version_1_still_matches_its_unchanged_product() -> None:
    for name, product in default_products().items():
        assert product.fingerprint_matches(PINNED_V1[name])
        assert product.fingerprint_matches(PINNED[name])
        assert not replace(product, prompt=product.prompt + " ").fingerprint_matches(PINNED_V1[name])


def test_a_job_recorded_under_version_2_still_matches_after_the_temperature_default_went() -> None:
    """Version 2 hashed temperature 0.2 when none was configured; the same configuration file
    read after the upgrade has no temperature at all, and its jobs in flight are not drifted."""
    for name, product in default_products().items():
        assert product.temperature is None
        assert product.fingerprint() != PINNED_V2[name]
        assert product.fingerprint_matches(PINNED_V2[name])
        # A setting version 2 could not express, or another temperature, is a real change.
        for change in ({"temperature": 0.7}, {"reasoning_effort": "low"}, {"verbosity": "low"}, {"top_p": 0.5}):
            assert not replace(product, **change).fingerprint_matches(PINNED_V2[name])
            assert not replace(product, **change).fingerprint_matches(PINNED_V1[name])
    # An explicit temperature of 0.2 is what version 2 hashed too.
    explicit = replace(default_products()["daily-brief"], temperature=0.2)
    assert explicit.fingerprint_matches(PINNED_V2["daily-brief"])


def test_the_in_flight_job_with_a_version_1_fingerprint_is_not_parked_as_drifted() -> None:
    product = default_products()["daily-brief"]
    t0 = dt.datetime(2026, 12, 1, 5, 0)
    row = slot_row(job_id="00000000-0000-4000-8000-000000000001", product=product.name,
                   day=t0.date(), priority=10, opens_at=t0, now=t0)
    row.update(state=State.RETRIEVED_NOT_VALIDATED, version=4, response_id="resp_1")
    assert decisions.config_check(Job(**{**row, "config_fingerprint": PINNED_V1[product.name]}), product) is None
    drifted = decisions.config_check(Job(**{**row, "config_fingerprint": "0" * 64}), product)
    assert drifted is not None and drifted.to == State.QUARANTINED and drifted.reason == Reason.CONFIG_DRIFT


@pytest.mark.parametrize("change", [
    {"model": "gpt-5"}, {"prompt": "Other."}, {"temperature": 0.9}, {"items": 3},
    {"languages": ("en",)}, {"tools": ("web_search",)}, {"top_p": 0.5}, {"reasoning_effort": "low"},
    {"verbosity": "high"},
])
def test_each_generation_setting_moves_the_fingerprint(change: dict[str, object]) -> None:
    base = default_products()["daily-brief"]
    assert replace(base, **change).fingerprint() != base.fingerprint()  # type: ignore[arg-type]


@pytest.mark.parametrize("change", [{"priority": 99}, {"titles": (("en", "Brief"),)}, {"max_output_bytes": 1000},
                                    {"max_output_tokens": 50_000}, {"service_tier": "flex"}])
def test_display_and_after_the_fact_settings_do_not(change: dict[str, object]) -> None:
    base = default_products()["daily-brief"]
    assert replace(base, **change).fingerprint() == base.fingerprint()  # type: ignore[arg-type]


def test_the_document_names_the_schemas_fields_and_limits() -> None:
    """A field added to the edition schema without a line in the document fails here, so the
    fingerprint cannot silently miss a change of what the model is asked for."""
    schema = fingerprint.document(default_products()["daily-brief"])["schema"]
    assert schema["edition"] == list(edition_schema.LanguageEdition.model_fields)
    assert schema["item"] == list(edition_schema.Item.model_fields)
    assert schema["source"] == list(edition_schema.Source.model_fields)
    assert schema["name"] == edition_schema.SCHEMA_NAME
    assert schema["limits"] == {"title": edition_limits.MAX_TITLE, "summary": edition_limits.MAX_SUMMARY,
                                "url": edition_limits.MAX_URL,
                                "sources_per_item": edition_limits.MAX_SOURCES_PER_ITEM}


def test_computing_a_fingerprint_loads_no_schema_library() -> None:
    code = ("import sys; from iipub.settings.config import default_products; "
            "[p.fingerprint() for p in default_products().values()]; "
            "print('pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_product_fingerprint_is_deterministic_across_instances() -> None:
    a = Product(name="x", prompt="p", languages=("en", "es"))
    b = Product(name="x", prompt="p", languages=("en", "es"))
    assert a is not b and a.fingerprint() == b.fingerprint()
