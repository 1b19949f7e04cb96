"""One verifying TLS context per process and per certificate location: built once, shared by
every client, built again when SSL_CERT_FILE names another bundle."""

from __future__ import annotations

import ssl

import certifi
import pytest

from iipub.core import tls


def test_the_context_verifies_and_is_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first = tls.client_context()
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert tls.client_context() is first


def test_another_certificate_file_is_another_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    default = tls.client_context()
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    named = tls.client_context()
    assert named is not default
    assert tls.client_context() is named
