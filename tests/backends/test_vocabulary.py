"""llama.cpp's vocabulary as both engines use it (:class:`localllm.backends.llama_cpp.Vocabulary`):
token texts rendered on several threads at once are each their own token's (#21)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from localllm.backends.llama_cpp import Model, init_backend


def test_token_texts_rendered_on_many_threads_at_once_are_each_tokens_own(smollm2_path: Path) -> None:
    """The engine thread renders generated tokens while the HTTP thread renders others (/detokenize,
    /health): each must get its own token's text, and the piece cache must keep only true texts."""
    init_backend()
    alone, shared = Model(smollm2_path), Model(smollm2_path)
    try:
        tokens = list(range(alone.vocab.n_vocab))
        expected = {t: alone.vocab.piece(t) for t in tokens}
        got: list[dict[int, bytes]] = []
        specials: list[str] = []

        def render(seed: int) -> None:
            order = random.Random(seed).sample(tokens, len(tokens))
            got.append({t: shared.vocab.piece(t) for t in order})
            specials.extend(shared.vocab.token_text(t) for t in order[:2000] if t < 20)

        threads = [threading.Thread(target=render, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wrong = {t: text for rendered in got for t, text in rendered.items() if text != expected[t]}
        assert not wrong, [(t, text, expected[t]) for t, text in list(wrong.items())[:5]]
        assert set(specials) <= {alone.vocab.token_text(t) for t in range(20)}
        assert [t for t in tokens if shared.vocab.piece(t) != expected[t]] == []  # nothing wrong stays cached
    finally:
        alone.close()
        shared.close()
