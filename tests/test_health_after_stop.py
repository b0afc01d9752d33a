"""After a clean stop, `pinch doctor --health` said
"the gateway is shutting down" forever; it must say the gateway has stopped."""

from __future__ import annotations

import subprocess
import sys
import time

from app.gateway.heartbeat import Heartbeat, health_problem


def a_finished_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    return int(done.stdout)


def test_health_after_a_clean_stop_says_the_gateway_has_stopped() -> None:
    beat = Heartbeat(pid=a_finished_pid(), at=time.time(), stopping=True)

    problem = health_problem(beat)

    assert problem is not None
    assert "has stopped" in problem and "pinch gateway" in problem
    assert "shutting down" not in problem
