"""The container's stop timeout and comments must
match the gateway's real timings (Docker's default 10 s stop would kill the gateway before its
shutdown grace ends)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from app.config import GatewayConfig
from app.gateway.heartbeat import MAX_AGE_S
from app.gateway.server import HEARTBEAT_EVERY_S

ROOT = Path(__file__).resolve().parents[1]


def seconds(value: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", value)
    assert match and value, f"not a compose duration: {value!r}"
    return int(match.group(1) or 0) * 60 + int(match.group(2) or 0)


def test_compose_waits_longer_than_the_gateways_shutdown_grace_before_killing_it() -> None:
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["pinch"]
    grace = GatewayConfig().shutdown_grace_s
    assert seconds(service["stop_grace_period"]) >= grace + 5


def test_the_dockerfile_states_the_real_heartbeat_interval_and_age() -> None:
    text = (ROOT / "Dockerfile").read_text()
    comment = next(line for line in text.splitlines() if "heartbeat" in line and "#" in line)
    assert f"every {HEARTBEAT_EVERY_S:.0f} s" in comment
    assert f"older than {MAX_AGE_S:.0f} s" in text
    readme = (ROOT / "README.md").read_text()
    assert f"Every {HEARTBEAT_EVERY_S:.0f} s the gateway writes" in readme
    assert "stop_grace_period" in readme


def test_the_image_installs_the_runtime_subset_of_the_lock_with_the_same_pins() -> None:
    """The container takes requirements-runtime.lock: every pin in it is in requirements.lock
    with the same version and hashes (scripts/lock.sh makes both), without the test tools."""
    root = Path(__file__).resolve().parents[1]

    def pins(name: str) -> dict[str, str]:
        found: dict[str, str] = {}
        current = ""
        for line in (root / name).read_text().splitlines():
            if line and line[0].isalnum() and "==" in line:
                current = line.split(" ")[0]
                found[current] = ""
            elif line.strip().startswith("--hash=") and current:
                found[current] += line.strip().rstrip("\\").strip()
        return found

    runtime, full = pins("requirements-runtime.lock"), pins("requirements.lock")
    assert runtime and all(full.get(pin) == hashes for pin, hashes in runtime.items())
    names = {pin.split("==")[0] for pin in runtime}
    assert not names & {"pytest", "ruff", "mypy", "playwright", "pgserver"}
    assert "requirements-runtime.lock" in (root / "Dockerfile").read_text()


def test_a_dependency_asked_for_with_extras_is_pinned_with_them() -> None:
    """litellm asks for httpx[http2]: a lock line `httpx==…` lets pip's --require-hashes mode
    look past the pin for the newest httpx and refuse to install (CI failed so the day httpx
    0.29 came out). Every extra that a locked package always asks for is on its pin."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lock = (ROOT / "requirements.lock").read_text()
    pinned: dict[str, set[str]] = {}
    for line in lock.splitlines():
        if line and line[0].isalnum() and "==" in line:
            req = Requirement(line.split(" ")[0])
            pinned[canonicalize_name(req.name)] = set(req.extras)
    asked: list[tuple[str, str, set[str]]] = []
    for name in pinned:
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.extras and (req.marker is None or req.marker.evaluate({"extra": ""})):
                asked.append((name, canonicalize_name(req.name), set(req.extras)))
    assert ("litellm", "httpx", {"http2"}) in asked
    missing = [(who, dep, want) for who, dep, want in asked if not want <= pinned.get(dep, set())]
    assert not missing, f"pin these with their extras in requirements.lock: {missing}"
