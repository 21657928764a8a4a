"""The torture test: random traffic through a real runner on both engines, each finished request
compared with its solo answer (text, token ids, log-probabilities), while others poll the runner.

See :mod:`support.torture` for what one run sends and checks. The short runs here take a minute or two
each on a busy two-core machine; ``scripts/soak.py --torture --minutes N`` runs them for longer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.torture import torture

# Requests a run: llama.cpp serves one sequence at a time, so its traffic is a queue and each request costs its
# whole answer in wall time; 8 of them (seed 21) still cover a context shift, clients leaving and spills.
REQUESTS = {"native": 16, "llama.cpp": 8}


@pytest.mark.timeout(900)  # two runners and a few hundred answers on a busy machine
@pytest.mark.parametrize("engine", list(REQUESTS))
def test_random_traffic_gives_every_request_its_solo_answer(smollm2_path: Path, engine: str) -> None:
    report = torture(smollm2_path, engine, seed=21, n_requests=REQUESTS[engine])
    assert not report.differences, "\n".join(report.differences)
    assert report.finished >= report.requests // 2 and report.shifts > 0 and report.polls > 0
    if engine == "native":
        assert report.preemptions > 0


@pytest.mark.timeout(900)
def test_random_traffic_on_sliding_layers_that_keep_only_their_window(gpt_oss_path: Path) -> None:
    """gpt-oss on the native engine: its sliding layers' window in rings, the prefix cache resuming at snapshots
    of it, through the same preemptions, spills and shifts."""
    report = torture(gpt_oss_path, "native", seed=21, n_requests=16)
    assert not report.differences, "\n".join(report.differences)
    assert report.finished >= report.requests // 2 and report.shifts > 0 and report.preemptions > 0
