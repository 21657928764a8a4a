"""Images through a real runner: SmolLM2 with the colour projector (libmtmd), its prefix cache and bad input."""

from __future__ import annotations

import pytest
from support.images import b64, bomb_png, picture
from support.runner import chat_prompt, parse_stream, running_runner, runner_threads

from localllm.images import MARKER


@pytest.fixture(scope="module")
def vision_runner(smollm2_path, projector_path):
    with running_runner(smollm2_path, "--projector", str(projector_path), "--ctx", "512", "--parallel", "2",
                        "--threads", runner_threads(), "--check-kv") as runner:
        yield runner


def ask(client, images: list[bytes], question: str = "What colour is this picture? Answer in one word.", **options):
    prompt = chat_prompt(MARKER * len(images) + question)
    body = {"prompt": prompt, "images": [b64(i) for i in images],
            "options": {"temperature": 0, "num_predict": 12, **options}}
    with client.stream("POST", "/completion", json=body) as r:
        assert r.status_code == 200, r.read()
        pieces, final = parse_stream(list(r.iter_lines()))
    assert final.get("done"), final
    return "".join(pieces), final


def test_an_image_changes_the_answer_and_its_kv_is_reused(vision_runner):
    with vision_runner.client() as c:
        red, final_red = ask(c, [picture("red")])
        again, final_again = ask(c, [picture("red")])
        blue, _ = ask(c, [picture("blue")])
        r = c.post("/completion", json={"prompt": chat_prompt("What colour is this picture? Answer in one word."), "stream": False,
                                        "options": {"temperature": 0, "num_predict": 12}})
        plain = r.json()["content"]
        tokens = c.post("/tokenize", json={"content": chat_prompt(MARKER + "What colour is this picture? Answer in "
                                                                  "one word."), "prompt": True,
                                           "images": [b64(picture("red"))]}).json()["tokens"]
    assert red == again
    image_end = max(i for i, t in enumerate(tokens) if t < 0) + 1
    # the image's 16 positions (and the text before) came from the cache; the short question after it is read
    # again in one batch, as the cold read read it, so the answer is the same bits (stream_engine.py)
    assert final_again["cached_tokens"] == image_end >= 16
    assert final_red["prompt_eval_count"] + final_red["cached_tokens"] == final_again["prompt_eval_count"] + \
        final_again["cached_tokens"]
    assert red != blue
    assert "red" in red.lower() and "blue" in blue.lower()  # the projector writes the colour's word
    assert plain not in (red, blue)
    assert all(t >= 0 for t in final_red["context"])  # placeholders stay inside the runner


def test_different_images_never_share_kv(vision_runner):
    with vision_runner.client() as c:
        ask(c, [picture("green")])
        _, final = ask(c, [picture("white")])
        tokens = c.post("/tokenize", json={"content": chat_prompt(MARKER + "What colour is this picture?"),
                                           "prompt": True, "images": [b64(picture("white"))]}).json()["tokens"]
    first_image = next(i for i, t in enumerate(tokens) if t < 0)
    assert final["cached_tokens"] <= first_image  # the text before the image at most
    assert sum(1 for t in tokens if t < 0) == 16


def test_two_images_in_one_prompt(vision_runner):
    with vision_runner.client() as c:
        both, final = ask(c, [picture("red"), picture("blue")], "What colours are these pictures?")
    assert both and final["prompt_eval_count"] + final["cached_tokens"] > 32


@pytest.mark.parametrize("data, problem", [
    (b64(picture("red")[:50]), "corrupt or truncated"),
    ("", "empty"),
    (b64(bomb_png()), "decompression bomb"),
    (b64(b"GIF89a this is a text file named photo.gif"), "not a PNG, JPEG, WebP or GIF image"),
    ("not base64 at all!", "not valid base64"),
])
def test_bad_images_are_400_and_the_runner_stays_up(vision_runner, data, problem):
    with vision_runner.client() as c:
        r = c.post("/completion", json={"prompt": chat_prompt(MARKER + "hi"), "images": [data]})
        assert r.status_code == 400 and problem in r.json()["error"], r.text
        assert "images[0]" in r.json()["error"]
        text, _ = ask(c, [picture("red")])
    assert text


def test_marker_and_image_counts_must_agree(vision_runner):
    with vision_runner.client() as c:
        r = c.post("/completion", json={"prompt": chat_prompt("no marker here"), "images": [b64(picture("red"))]})
    assert r.status_code == 400 and "1 images" in r.json()["error"] and "0 image markers" in r.json()["error"]


def test_images_over_the_context_are_400(vision_runner):
    with vision_runner.client() as c:
        r = c.post("/completion", json={"prompt": chat_prompt(MARKER * 40 + "hi"),
                                        "images": [b64(picture("red"))] * 40})
        assert r.status_code == 400, r.text
        assert "images" in r.json()["error"] and "context length of 512" in r.json()["error"]
        assert ask(c, [picture("blue")])[0]


def test_a_runner_without_projector_refuses_images(smollm2_path):
    with running_runner(smollm2_path, "--ctx", "256", "--parallel", "1", "--threads", runner_threads()) as runner:
        with runner.client() as c:
            r = c.post("/completion", json={"prompt": chat_prompt(MARKER + "hi"), "images": [b64(picture("red"))]})
    assert r.status_code == 400 and "does not support images" in r.json()["error"]


def test_placeholders_are_negative_and_differ_between_images():
    from localllm.backends.projector import placeholders

    a, b = "ab" * 32, "ab" * 31 + "ac"  # digests differing in their last bits only
    run_a, run_b = placeholders(a, 576), placeholders(b, 576)
    assert all(t < 0 for t in run_a + run_b) and run_a == placeholders(a, 576)
    assert run_a[0] != run_b[0] and run_a != run_b  # the first nine carry every bit of the digest


@pytest.mark.parametrize("family", ["qwen25vl", "qwen35"])
def test_m_rope_images_keep_the_kv_books_across_turns(tmp_path, family):
    """Qwen2.5-VL (attention) and Qwen 3.5 (hybrid) place an image at fewer positions than its tokens: with the
    KV books checked after every step, a turn that extends the last one and the first turn again reuse the
    image's cells, and the first turn's answer comes again."""
    from support import arch_models

    model, mmproj, _one = arch_models.vision_family(tmp_path, family)
    with running_runner(model, "--projector", str(mmproj), "--ctx", "512", "--parallel", "2",
                        "--threads", runner_threads(), "--check-kv") as runner, runner.client() as client:
        first, done = ask(client, [picture("red")], "look here", num_predict=4)
        longer, done_longer = ask(client, [picture("red")], "look here and there", num_predict=4)
        again, done_again = ask(client, [picture("red")], "look here", num_predict=4)
    assert again == first and done_again["cached_tokens"] > 0
    if family == "qwen25vl":  # the hybrid resumes only at a kept state: the longer question leaves it before it
        assert done_longer["cached_tokens"] > 0
    assert done["done_reason"] == done_again["done_reason"] == "length"
