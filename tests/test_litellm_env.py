"""litellm is imported one way (memory.embeddings.litellm_env), offline, whichever part of Pinch
asks first."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memory.embeddings.litellm_env import OFFLINE_ENVIRONMENT, bundled_tokenizers_dir

PROBE = """
import json, os, sys
if sys.argv[1] == "embeddings":
    from memory.embeddings.litellm_provider import load_litellm
    load_litellm()
else:
    import asyncio
    from agent.model.litellm_client import load_litellm
    asyncio.run(load_litellm())
names = [*json.loads(sys.argv[2]), "TIKTOKEN_CACHE_DIR"]
print(json.dumps({name: os.environ.get(name) for name in names}))
"""


@pytest.mark.parametrize("first", ["embeddings", "model client"])
def test_either_user_imports_litellm_with_the_same_offline_environment(first: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM_", "TIKTOKEN_"))}
    names = json.dumps(list(OFFLINE_ENVIRONMENT))

    done = subprocess.run(
        [sys.executable, "-c", PROBE, first, names],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert {k: seen[k] for k in OFFLINE_ENVIRONMENT} == OFFLINE_ENVIRONMENT
    assert seen["TIKTOKEN_CACHE_DIR"] == str(bundled_tokenizers_dir())
