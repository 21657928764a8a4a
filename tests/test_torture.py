"""The torture test: random traffic through a real runner on both engines, each finished request
compared with its solo answer (text, token ids, log-probabilities), while others poll the runner.

See :mod:`torture` for what one run sends and checks. The short runs here take a minute or two
each on a busy two-core machine; ``scripts/soak.py --torture --minutes N`` runs them for longer.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from localllm.runner.backend import Model, init_backend
from torture import torture

ENGINES = ["native", "llama.cpp"]


@pytest.mark.timeout(900)  # two runners and a few hundred answers on a busy machine
@pytest.mark.parametrize("engine", ENGINES)
def test_random_traffic_gives_every_request_its_solo_answer(smollm2_path: Path, engine: str) -> None:
    report = torture(smollm2_path, engine, seed=21, n_requests=16)
    assert not report.differences, "\n".join(report.differences)
    assert report.finished >= report.requests // 2 and report.shifts > 0 and report.polls > 0
    if engine == "native":
        assert report.preemptions > 0


def test_token_texts_rendered_on_many_threads_at_once_are_each_tokens_own(smollm2_path: Path) -> None:
    """The engine thread renders generated tokens while the HTTP thread renders others (/detokenize,
    /health): each must get its own token's text, and the piece cache must keep only true texts."""
    init_backend()
    alone, shared = Model(smollm2_path), Model(smollm2_path)
    try:
        tokens = list(range(alone.n_vocab))
        expected = {t: alone.piece(t) for t in tokens}
        got: list[dict[int, bytes]] = []
        specials: list[str] = []

        def render(seed: int) -> None:
            order = random.Random(seed).sample(tokens, len(tokens))
            got.append({t: shared.piece(t) for t in order})
            specials.extend(shared.token_text(t) for t in order[:2000] if t < 20)

        threads = [threading.Thread(target=render, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wrong = {t: text for rendered in got for t, text in rendered.items() if text != expected[t]}
        assert not wrong, [(t, text, expected[t]) for t, text in list(wrong.items())[:5]]
        assert set(specials) <= {alone.token_text(t) for t in range(20)}
        assert [t for t in tokens if shared.piece(t) != expected[t]] == []  # nothing wrong stays cached
    finally:
        alone.close()
        shared.close()
