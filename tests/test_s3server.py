"""The S3 test server (tests/s3server.py): installed but not starting is an error, so the
S3 tests fail there instead of skipping."""

from __future__ import annotations

import pytest

from tests import s3server


def test_a_server_that_exits_is_an_error_not_a_skip(monkeypatch):
    pytest.importorskip("s3fs")
    monkeypatch.setattr(s3server, "_executable", lambda: "/bin/false")
    with (pytest.raises(RuntimeError, match=r"did not answer .* \(it exited with 1\)"),
          s3server.moto_server(wait_s=5)):
        pass


def test_not_installed_is_none(monkeypatch):
    monkeypatch.setattr(s3server, "_executable", lambda: None)
    with s3server.moto_server(wait_s=1) as endpoint:
        assert endpoint is None
