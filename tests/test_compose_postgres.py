"""The compose profile `postgres`: PostgreSQL with pgvector (a pinned tag) and two gateway
replicas sharing it and one volume of Markdown files, with health checks. Checked by reading
the file (PyYAML): no image can be pulled on the test machines, so it is not run here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from app.config import GatewayConfig

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return found


def _env_example() -> dict[str, str]:
    lines = (ROOT / ".env.postgres.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_the_profile_runs_pgvector_at_a_pinned_tag_with_a_health_check() -> None:
    db = _compose()["services"]["postgres"]
    assert db["profiles"] == ["postgres"]
    name, _, tag = db["image"].partition(":")
    assert name == "pgvector/pgvector" and tag not in ("", "latest") and "pg16" in tag
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in db["volumes"])
    # Shared buffers that hold a 100k-chunk HNSW index (195 MB), inside the service's memory.
    assert db["command"][:1] == ["postgres"] and "shared_buffers=512MB" in db["command"]
    assert db["mem_limit"] == "2g"


def test_two_gateways_share_the_database_and_one_volume_of_markdown_files() -> None:
    compose = _compose()
    gateway = compose["services"]["gateway"]
    assert gateway["profiles"] == ["postgres"] and gateway["deploy"]["replicas"] == 2
    assert gateway["environment"]["PINCH_STORE__BACKEND"] == "postgres"
    assert ".env.postgres" in gateway["env_file"]  # PINCH_STORE__DSN, a secret: not in the file
    assert "PINCH_STORE__DSN" not in gateway["environment"]
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert gateway["healthcheck"]["test"] == ["CMD", "pinch", "doctor", "--health"]
    (files,) = gateway["volumes"]
    volume, _, mount = files.partition(":")
    assert mount == gateway["environment"]["PINCH_HOME"] and volume in compose["volumes"]
    # The one-file gateway's home: the Markdown files and the agent.sqlite files to migrate.
    assert files in compose["services"]["pinch"]["volumes"]
    grace = float(gateway["stop_grace_period"].rstrip("s"))
    assert grace >= GatewayConfig().shutdown_grace_s + 5


def test_the_env_example_points_the_gateways_at_the_compose_database() -> None:
    env = _env_example()
    db = _compose()["services"]["postgres"]["environment"]
    password = env["POSTGRES_PASSWORD"]
    expected = f"postgresql://{db['POSTGRES_USER']}:{password}@postgres:5432/{db['POSTGRES_DB']}"
    assert env["PINCH_STORE__DSN"] == expected
    assert ".env.postgres" in (ROOT / ".gitignore").read_text().split()


def test_the_default_gateway_is_not_part_of_the_profile() -> None:
    """`docker compose up -d` still starts the one-file SQLite gateway alone."""
    services = _compose()["services"]
    assert "profiles" not in services["pinch"]
    text = (ROOT / "docker-compose.yml").read_text()
    assert "docker compose --profile postgres up -d postgres gateway" in text
    assert "-e PINCH_STORE__BACKEND=sqlite gateway" in text  # the migration reads SQLite
