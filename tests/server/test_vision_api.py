"""Vision end to end: SmolLM2 + the colour projector created as a model through the real daemon, and
images sent by the real ``ollama``, ``openai`` and ``anthropic`` clients (and httpx for Responses)."""

from __future__ import annotations

import anthropic
import httpx
import ollama
import openai
import pytest
from support.fixtures import with_projector
from support.gguf_builders import tiny_model
from support.images import b64, bomb_png, data_url, picture

VISION = "smolvision"
TEXT_ONLY = "smollm2:135m"
QUESTION = "What colour is this picture? Answer in one word."


@pytest.fixture(scope="module")
def vision(daemon, projector_path):
    daemon.create(VISION, with_projector(projector_path, temperature=0, num_ctx=1024))
    return daemon


@pytest.fixture(scope="module")
def oai(vision) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{vision.url}/v1", api_key="unused", max_retries=0)


def ollama_ask(daemon, colour: str, **extra) -> str:
    client = ollama.Client(host=daemon.url)
    answer = client.chat(model=VISION, options={"num_predict": 12, "temperature": 0}, messages=[
        {"role": "user", "content": QUESTION, "images": [picture(colour)]}], **extra)
    return answer.message.content


def openai_ask(client: openai.OpenAI, colour: str, fmt: str = "PNG", media_type: str = "image/png"):
    return client.chat.completions.create(model=VISION, max_tokens=12, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": QUESTION},
                                     {"type": "image_url", "image_url": {"url": data_url(picture(colour, fmt),
                                                                                         media_type)}}]}])


def test_show_lists_vision_only_with_a_projector(vision):
    shown = httpx.post(f"{vision.url}/api/show", json={"model": VISION}).json()
    assert "vision" in shown["capabilities"]
    froms = [line for line in shown["modelfile"].splitlines() if line.startswith("FROM ")]
    assert len(froms) == 2 and "sha256-" in froms[1]  # the model, then its projector layer
    assert shown["projector_info"]["clip.projector_type"] == "mlp"
    assert shown["projector_info"]["clip.vision.projection_dim"] == shown["model_info"]["llama.embedding_length"]
    plain = httpx.post(f"{vision.url}/api/show", json={"model": TEXT_ONLY}).json()
    assert "vision" not in plain["capabilities"] and "projector_info" not in plain


def test_ollama_client_sends_images_and_the_answer_follows_them(vision):
    red, again, blue = ollama_ask(vision, "red"), ollama_ask(vision, "red"), ollama_ask(vision, "blue")
    assert red == again and red != blue
    assert "red" in red.lower() and "blue" in blue.lower()
    generated = ollama.Client(host=vision.url).generate(model=VISION, prompt=QUESTION, images=[picture("blue")],
                                                        options={"num_predict": 12, "temperature": 0})
    assert "blue" in generated.response.lower()


def test_openai_image_url_reuses_the_image_kv(oai):
    first = openai_ask(oai, "blue")
    second = openai_ask(oai, "blue")
    other = openai_ask(oai, "green")
    assert first.choices[0].message.content == second.choices[0].message.content
    assert second.usage.prompt_tokens_details.cached_tokens > 16  # the image's 16 positions and the text before it
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    assert other.choices[0].message.content != first.choices[0].message.content
    assert "blue" in first.choices[0].message.content.lower()


@pytest.mark.parametrize("fmt, media_type", [("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif")])
def test_jpeg_webp_and_gif_are_read(oai, fmt, media_type):
    assert "red" in openai_ask(oai, "red", fmt, media_type).choices[0].message.content.lower()


def test_anthropic_image_blocks(vision):
    client = anthropic.Anthropic(base_url=vision.url, api_key="unused", max_retries=0)

    def ask(colour: str):
        return client.messages.create(model=VISION, max_tokens=12, extra_body={"temperature": 0}, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(picture(colour))}},
            {"type": "text", "text": QUESTION}]}])

    green, again, blue = ask("green"), ask("green"), ask("blue")
    assert green.content[0].text == again.content[0].text != blue.content[0].text
    assert again.usage.cache_read_input_tokens > 16
    counted = client.messages.count_tokens(model=VISION, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(picture("green"))}},
        {"type": "text", "text": QUESTION}]}])
    assert counted.input_tokens == green.usage.input_tokens + green.usage.cache_read_input_tokens


def test_responses_input_image(vision):
    def ask(colour: str) -> str:
        r = httpx.post(f"{vision.url}/v1/responses", timeout=120, json={
            "model": VISION, "max_output_tokens": 12, "temperature": 0, "input": [{"role": "user", "content": [
                {"type": "input_text", "text": QUESTION},
                {"type": "input_image", "image_url": data_url(picture(colour))}]}]})
        assert r.status_code == 200, r.text
        return r.json()["output"][0]["content"][0]["text"]

    assert "blue" in ask("blue").lower() and ask("blue") != ask("red")


@pytest.mark.slow  # some 1,000 tokens of prefill with twenty images
def test_older_messages_with_images_are_dropped_whole_to_fit(vision):
    messages = []
    for colour in ("red", "green", "blue", "white", "black") * 8:  # some 1,500 tokens: over the context
        messages += [{"role": "user", "content": QUESTION, "images": [b64(picture(colour))]},
                     {"role": "assistant", "content": colour}]
    messages.append({"role": "user", "content": QUESTION, "images": [b64(picture("red"))]})
    r = httpx.post(f"{vision.url}/api/chat", timeout=900, json={
        "model": VISION, "messages": messages, "stream": False, "options": {"num_predict": 12}})
    assert r.status_code == 200, r.text
    assert r.json()["prompt_eval_count"] <= 1024 - 12  # the model's num_ctx, less the answer's room


def test_text_only_models_refuse_images_in_every_dialect(vision):
    png = b64(picture("red"))
    r = httpx.post(f"{vision.url}/api/generate", json={"model": TEXT_ONLY, "prompt": "hi", "images": [png]})
    assert r.status_code == 400 and r.json()["error"] == f"{TEXT_ONLY!r} does not support images"
    with pytest.raises(openai.BadRequestError, match="does not support images"):
        openai.OpenAI(base_url=f"{vision.url}/v1", api_key="x", max_retries=0).chat.completions.create(
            model=TEXT_ONLY, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": data_url(picture("red"))}}]}])
    with pytest.raises(anthropic.BadRequestError, match="does not support images") as caught:
        anthropic.Anthropic(base_url=vision.url, api_key="x", max_retries=0).messages.create(
            model=TEXT_ONLY, max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{vision.url}/v1/responses", json={"model": TEXT_ONLY, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": data_url(picture("red"))}]}]})
    assert r.status_code == 400 and "does not support images" in r.json()["error"]["message"]


@pytest.mark.parametrize("image, problem", [
    (b64(picture("red")[:60]), "corrupt or truncated"),
    ("", "empty"),
    (b64(bomb_png()), "decompression bomb"),
    (b64(b"\x89PNG but really a shopping list"), "not a PNG, JPEG, WebP or GIF image"),
    ("@@not-base64@@", "not valid base64"),
])
def test_bad_images_are_400_naming_the_problem_and_the_model_keeps_serving(vision, image, problem):
    r = httpx.post(f"{vision.url}/api/chat", timeout=60, json={"model": VISION, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": QUESTION, "images": [image]}]})
    assert r.status_code == 400, r.text
    assert problem in r.json()["error"] and "messages[2].images[0]" in r.json()["error"]
    assert "red" in ollama_ask(vision, "red").lower()


@pytest.mark.parametrize("url, problem", [
    ("data:text/plain;base64,aGVsbG8=", "media type 'text/plain' is not an image type"),
    ("https://example.org/cat.png", "remote image URLs are not fetched"),
    ("data:image/png,notbase64", "must be base64 encoded"),
])
def test_bad_image_urls_are_400(oai, url, problem):
    with pytest.raises(openai.BadRequestError, match=problem):
        oai.chat.completions.create(model=VISION, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}]}])


def test_more_images_than_the_context_holds_is_400(vision):
    r = httpx.post(f"{vision.url}/api/chat", timeout=60, json={"model": VISION, "messages": [
        {"role": "user", "content": QUESTION, "images": [b64(picture("red"))] * 70}]})  # 70 x 16 positions
    assert r.status_code == 400, r.text
    assert "does not fit the context length of 1024" in r.json()["error"] and "70 images" in r.json()["error"]
    assert "red" in ollama_ask(vision, "red").lower()


def test_create_refuses_a_projector_that_cannot_work(vision, smollm2_path, tmp_path):
    not_projector = tiny_model(tmp_path / "llama.gguf")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 7)
    for path, problem in ((not_projector, "not a projector"), (truncated, "not a valid GGUF")):
        r = httpx.post(f"{vision.url}/api/create", timeout=60, json={
            "model": "broken-vision", "modelfile": f"FROM {smollm2_path}\nFROM {path}\n", "stream": False})
        assert r.status_code == 400, r.text
        assert str(path) in r.json()["error"] and problem in r.json()["error"]


def test_a_projector_for_another_model_is_refused_at_create(vision, gemma3_path, projector_path):
    r = httpx.post(f"{vision.url}/api/create", timeout=60, json={
        "model": "mismatched-vision", "modelfile": f"FROM {gemma3_path}\nFROM {projector_path}\n", "stream": False})
    assert r.status_code == 400, r.text
    assert str(projector_path) in r.json()["error"] and "576" in r.json()["error"] and "640" in r.json()["error"]


def test_a_projector_that_fails_to_load_is_an_error_naming_it(vision, smollm2_path, tmp_path):
    from gguf import GGUFWriter

    hollow = tmp_path / "hollow-mmproj.gguf"  # a projector's header and no weights: libmtmd cannot load it
    w = GGUFWriter(str(hollow), "clip")
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type("mlp")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    vision.create("hollow-vision", f"FROM {smollm2_path}\nFROM {hollow}\n")
    r = httpx.post(f"{vision.url}/api/chat", timeout=120, json={"model": "hollow-vision", "stream": False,
                                                                "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code >= 400 and "cannot load projector" in r.json()["error"], r.text
    assert "sha256-" in r.json()["error"]  # the projector's file in the store
