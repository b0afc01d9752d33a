"""`[store]`: backend = "sqlite" | "postgres" and its DSN, a secret (environment only when it
carries a password, never in a message or a log)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.config import ConfigError, load_settings
from app.gateway.run import settings_secrets
from common.redact import RedactingFilter, redact
from memory.store.store_config import dsn_has_password, redacted_dsn

DSN = "postgresql://pinch:hunter2-very-secret@db.example:5432/pinch"


def write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text, encoding="utf-8")


def test_sqlite_is_the_default_backend(pinch_home: Path) -> None:
    settings = load_settings()

    assert settings.store.backend == "sqlite" and settings.store.dsn is None


def test_the_dsn_comes_from_the_environment(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", DSN)

    settings = load_settings()

    assert settings.store.backend == "postgres" and settings.store.dsn_text() == DSN
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.store)


def test_postgres_without_a_dsn_is_refused_with_advice(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")

    with pytest.raises(ConfigError, match="PINCH_STORE__DSN"):
        load_settings()


def test_an_unknown_backend_is_refused(pinch_home: Path) -> None:
    write_config(pinch_home, '[store]\nbackend = "mysql"\n')

    with pytest.raises(ConfigError, match=r"store\.backend"):
        load_settings()


def test_a_dsn_with_a_password_in_the_file_is_refused_without_showing_it(
    pinch_home: Path,
) -> None:
    write_config(pinch_home, f'[store]\nbackend = "postgres"\ndsn = "{DSN}"\n')

    with pytest.raises(ConfigError) as err:
        load_settings()

    assert "PINCH_STORE__DSN" in str(err.value) and "hunter2" not in str(err.value)


def test_a_dsn_without_a_password_may_live_in_the_file(pinch_home: Path) -> None:
    dsn = "postgresql://pinch@/pinch?host=/run/postgresql"
    write_config(pinch_home, f'[store]\nbackend = "postgres"\ndsn = "{dsn}"\n')

    assert load_settings().store.dsn_text() == dsn


@pytest.mark.parametrize(
    ("dsn", "has"),
    [
        (DSN, True),
        ("postgresql://pinch@db/pinch", False),
        ("postgresql://pinch:@db/pinch", False),
        ("host=db user=pinch password='s3cr et' dbname=pinch", True),
        ("host=db user=pinch dbname=pinch", False),
    ],
)
def test_a_password_is_found_in_both_dsn_forms(dsn: str, has: bool) -> None:
    assert dsn_has_password(dsn) is has
    assert ("s3cr" in redacted_dsn(dsn) or "hunter2" in redacted_dsn(dsn)) is False


def test_the_dsn_never_reaches_a_log(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PINCH_STORE__BACKEND", "postgres")
    monkeypatch.setenv("PINCH_STORE__DSN", DSN)
    settings = load_settings()
    logger = logging.getLogger("test.store.dsn")
    logger.addFilter(RedactingFilter(settings_secrets(settings)))
    try:
        with caplog.at_level(logging.INFO, logger="test.store.dsn"):
            logger.info("connecting to %s", DSN)
    finally:
        logger.filters.clear()

    assert "hunter2" not in caplog.text
    # Any database URL's password, configured or not, is blanked too.
    assert redact("failed: postgresql://bob:pa55word-x@h/db") == (
        "failed: postgresql://bob:[redacted]@h/db"
    )
