"""Audio end to end: SmolLM2 + the tone projector created as a model through the real daemon; tones,
silence and chirps in WAV, FLAC and MPEG audio sent by the real ``openai`` and ``ollama`` clients (and
httpx for Responses and Anthropic), and the transcription endpoints through ``openai``."""

from __future__ import annotations

import anthropic
import httpx
import ollama
import openai
import pytest
from support.audio import b64, chirp, flac, mpeg_audio, silence, tone, wav
from support.fixtures import with_projector
from support.images import picture

HEARING = "smolhearing"
TEXT_ONLY = "smollm2:135m"
QUESTION = "What do you hear? Answer in one word."
LOW, HIGH = 300.0, 3000.0  # Hz: the projector hears them as "low" and "high"


@pytest.fixture(scope="module")
def hearing(daemon, audio_projector_path):
    daemon.create(HEARING, with_projector(audio_projector_path, temperature=0, num_ctx=1024))
    return daemon


@pytest.fixture(scope="module")
def oai(hearing) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{hearing.url}/v1", api_key="unused", max_retries=0)


def openai_ask(client: openai.OpenAI, audio: bytes, fmt: str = "wav", **extra):
    return client.chat.completions.create(model=HEARING, max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": b64(audio), "format": fmt}},
                                     {"type": "text", "text": QUESTION}]}], **extra)


def ollama_ask(daemon, audio: bytes) -> str:
    answer = ollama.Client(host=daemon.url).chat(model=HEARING, options={"num_predict": 8, "temperature": 0},
                                                 messages=[{"role": "user", "content": QUESTION, "images": [audio]}])
    return answer.message.content


def test_show_lists_audio_for_a_model_that_hears(hearing):
    shown = httpx.post(f"{hearing.url}/api/show", json={"model": HEARING}).json()
    assert "audio" in shown["capabilities"] and "vision" not in shown["capabilities"]
    assert shown["projector_info"]["clip.projector_type"] == "voxtral"
    plain = httpx.post(f"{hearing.url}/api/show", json={"model": TEXT_ONLY}).json()
    assert "audio" not in plain["capabilities"]


def first_token_logprobs(answer) -> dict[str, float]:
    return {t.token: t.logprob for t in answer.choices[0].logprobs.content[0].top_logprobs}


def test_openai_input_audio_follows_the_signal_and_reuses_its_kv(oai):
    low = openai_ask(oai, wav(tone(LOW, 12)), logprobs=True, top_logprobs=5)
    again = openai_ask(oai, wav(tone(LOW, 12)))
    high = openai_ask(oai, wav(tone(HIGH, 12)), logprobs=True, top_logprobs=5)
    sweep = openai_ask(oai, wav(chirp(200, 4000, 12)), logprobs=True, top_logprobs=5)
    assert low.choices[0].message.content == again.choices[0].message.content
    assert low.choices[0].message.content != high.choices[0].message.content
    assert len({str(first_token_logprobs(a)) for a in (low, high, sweep)}) == 3  # the logits follow the signal
    assert again.usage.prompt_tokens_details.cached_tokens >= 125  # the clip's 125 positions came from the cache
    assert again.usage.prompt_tokens == low.usage.prompt_tokens


@pytest.mark.slow  # six clips through the encoder
def test_flac_and_mpeg_audio_are_decoded_like_wav(oai):
    def answer(audio: bytes, fmt: str) -> str:
        return openai_ask(oai, audio, fmt).choices[0].message.content

    assert answer(flac(tone(LOW, 12)), "flac") == answer(wav(tone(LOW, 12)), "wav")
    assert answer(mpeg_audio(None, 12), "mp3") == answer(wav(silence(12)), "wav")
    assert answer(mpeg_audio(0, 12), "mp3") != answer(mpeg_audio(4, 12), "mp3")  # about 375 Hz and 3.4 kHz


@pytest.mark.slow  # two more clips through the encoder
def test_other_rates_and_channel_counts_are_resampled(oai):
    resampled = openai_ask(oai, wav(tone(HIGH, 12, rate=44100), rate=44100, channels=2), logprobs=True, top_logprobs=5)
    native = openai_ask(oai, wav(tone(HIGH, 12)), logprobs=True, top_logprobs=5)
    resampled_top, native_top = first_token_logprobs(resampled), first_token_logprobs(native)
    assert max(resampled_top, key=resampled_top.get) == max(native_top, key=native_top.get)


def test_ollama_takes_audio_in_images_as_ollama_does(hearing, oai):
    low, high = ollama_ask(hearing, wav(tone(LOW, 12))), ollama_ask(hearing, wav(tone(HIGH, 12)))
    assert low != high
    assert low == openai_ask(oai, wav(tone(LOW, 12))).choices[0].message.content
    generated = ollama.Client(host=hearing.url).generate(model=HEARING, prompt=QUESTION, images=[wav(tone(HIGH, 12))],
                                                         options={"num_predict": 8, "temperature": 0})
    assert generated.response


def test_responses_input_audio(hearing, oai):
    def ask(audio: bytes) -> str:
        r = httpx.post(f"{hearing.url}/v1/responses", timeout=120, json={
            "model": HEARING, "max_output_tokens": 8, "temperature": 0, "input": [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": b64(audio), "format": "wav"}},
                {"type": "input_text", "text": QUESTION}]}]})
        assert r.status_code == 200, r.text
        return r.json()["output"][0]["content"][0]["text"]

    assert ask(wav(tone(HIGH, 12))) == openai_ask(oai, wav(tone(HIGH, 12))).choices[0].message.content
    assert ask(wav(tone(HIGH, 12))) != ask(wav(tone(LOW, 12)))


def test_anthropic_has_no_audio_block_and_says_so(hearing):
    client = anthropic.Anthropic(base_url=hearing.url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="block type 'audio' is not supported"):
        client.messages.create(model=HEARING, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "audio", "source": {"type": "base64", "media_type": "audio/wav", "data": b64(wav(silence(1)))}},
            {"type": "text", "text": QUESTION}]}])


def test_a_model_that_cannot_hear_is_named_in_a_400(hearing, oai):
    with pytest.raises(openai.BadRequestError, match=f"'{TEXT_ONLY}' does not support audio"):
        oai.chat.completions.create(model=TEXT_ONLY, messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": b64(wav(silence(1))), "format": "wav"}}]}])
    r = httpx.post(f"{hearing.url}/api/chat", json={"model": TEXT_ONLY, "messages": [
        {"role": "user", "content": QUESTION, "images": [b64(wav(silence(1)))]}]})
    assert r.status_code == 400 and f"'{TEXT_ONLY}' does not support audio" in r.json()["error"]
    r = httpx.post(f"{hearing.url}/api/chat", json={"model": HEARING, "messages": [
        {"role": "user", "content": QUESTION, "images": [b64(picture("red"))]}]})
    assert r.status_code == 400 and f"'{HEARING}:latest' does not support images" in r.json()["error"]


BAD_AUDIO = [
    (b"", "wav", "data is empty"),
    (wav(tone(LOW, 2))[:30], "wav", "truncated"),
    (wav(tone(LOW, 2))[:-5000], "wav", "the file is truncated"),
    (b"RIFF\x10\x00\x00\x00WAVE" + b"a shopping list, not audio" * 4, "wav", "no fmt chunk"),
    (picture("red"), "wav", "is not WAV audio as its format says"),
    (flac(tone(LOW, 1)), "mp3", "is not MP3 audio as its format says (it is FLAC)"),
    (b"\xff\xfb" + b"no mpeg frame follows this sync word" * 4, "mp3", "not a valid MP3"),
    (mpeg_audio(0, 1)[:40], "mp3", "could not be decoded"),  # one frame header, and the frame cut short
    (wav(tone(LOW, 1), rate=1_000_000), "wav", "claims 1000000 samples a second"),
    (wav(tone(LOW, 0.0001)), "wav", "too short"),
]


def test_bad_audio_is_400_naming_the_problem_and_the_model_keeps_serving(oai):
    for audio, fmt, problem in BAD_AUDIO:
        with pytest.raises(openai.BadRequestError) as caught:
            openai_ask(oai, audio, fmt)
        assert problem in caught.value.body["message"], (problem, caught.value.body)
    assert openai_ask(oai, wav(tone(LOW, 2))).choices[0].message.content


def test_absurd_channel_counts_are_400(hearing):
    many = wav(tone(LOW, 0.1), channels=40)
    r = httpx.post(f"{hearing.url}/api/chat", timeout=60, json={"model": HEARING, "messages": [
        {"role": "user", "content": QUESTION, "images": [b64(many)]}]})
    assert r.status_code == 400 and "claims 40 channels" in r.json()["error"], r.text
    assert "messages[0].images[0]" in r.json()["error"]


def test_more_audio_than_the_context_holds_is_400(hearing):
    r = httpx.post(f"{hearing.url}/api/chat", timeout=120, json={"model": HEARING, "messages": [
        {"role": "user", "content": QUESTION, "images": [b64(wav(silence(200)))]}]})  # 7 windows of 187 positions
    assert r.status_code == 400, r.text
    assert "context length of 1024" in r.json()["error"]
    assert ollama_ask(hearing, wav(tone(LOW, 2)))
