"""Speech to text as OpenAI's: /v1/audio/transcriptions and /translations through the real ``openai`` client,
on SmolLM2 + the tone projector (it "hears" tones, so a transcript follows the signal, not words)."""

from __future__ import annotations

import base64
import json
import re

import httpx
import numpy as np
import openai
import pytest
from support.audio import flac, mpeg_audio, silence, tone, wav
from support.fixtures import with_projector

HEARING = "smolhearing-stt"
SMALL = "smolhearing-stt-small"
TEXT_ONLY = "smollm2:135m"


#: A piece's transcript ends at its first sentence: the checks are on what the signal makes of it, its timing and
#: its framing, not its length (unstopped, SmolLM2 goes on about "the audio" for 100-450 tokens a piece).
ONE_SENTENCE = '"."'


@pytest.fixture(scope="module")
def hearing(daemon, audio_projector_path):
    daemon.create(HEARING, with_projector(audio_projector_path, num_ctx=1024, stop=ONE_SENTENCE))
    daemon.create(SMALL, with_projector(audio_projector_path, num_ctx=512, stop=ONE_SENTENCE))
    return daemon


@pytest.fixture(scope="module")
def oai(hearing) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{hearing.url}/v1", api_key="unused", max_retries=0, timeout=900)


def transcribe(client: openai.OpenAI, audio: bytes, name: str = "clip.wav", model: str = HEARING, **extra):
    return client.audio.transcriptions.create(model=model, file=(name, audio), **extra)


def test_a_transcript_follows_the_signal_in_every_format(oai):
    low = transcribe(oai, wav(tone(300, 12)))  # cold; the same file again continues from the prefix cache
    high = transcribe(oai, flac(tone(3000, 12)), "clip.flac")
    assert low.text and high.text and low.text != high.text
    assert transcribe(oai, wav(tone(300, 12)), response_format="text").strip() == low.text
    srt = transcribe(oai, wav(tone(300, 12)), response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:12,000\n") and low.text in srt
    vtt = transcribe(oai, wav(tone(300, 12)), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:12.000\n")
    verbose = transcribe(oai, wav(tone(300, 12)), response_format="verbose_json", timestamp_granularities=["segment"])
    assert verbose.text == low.text and verbose.duration == 12.0
    assert getattr(verbose, "language", None) is None  # not given, and the model does not say
    assert [(s.start, s.end, s.text) for s in verbose.segments] == [(0.0, 12.0, low.text)]
    assert verbose.segments[0].tokens and verbose.segments[0].avg_logprob < 0
    assert transcribe(oai, mpeg_audio(None, 3.0), "quiet.mp3", response_format="verbose_json").duration == 3.0


def test_a_stream_is_openais_transcript_events(oai):
    events = list(transcribe(oai, wav(tone(300, 12)), stream=True))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    segments = [e for e in events if e.type == "transcript.text.segment"]
    done = events[-1]
    assert done.type == "transcript.text.done" and deltas and "".join(deltas).strip() == done.text
    assert [(s.id, s.start, s.end, s.text) for s in segments] == [("seg_0", 0.0, 12.0, done.text)]
    assert done.text == transcribe(oai, wav(tone(300, 12))).text
    assert done.usage.input_tokens >= 125 and done.usage.output_tokens == done.usage.total_tokens - \
        done.usage.input_tokens


def long_recording(container: str) -> bytes:
    """Low tone, silence, high tone, silence, low tone: 68 s, longer than the small model's context holds."""
    if container == "mp3":  # MPEG audio holds steady subband tones: band 0 is low (375 Hz), band 4 high (3.4 kHz)
        return b"".join(mpeg_audio(band, seconds) for band, seconds in
                        ((0, 28), (None, 1.5), (4, 27), (None, 1.5), (0, 10)))
    recording = np.concatenate([tone(300, 28), silence(1.5), tone(3000, 27), silence(1.5), tone(300, 10)])
    return wav(recording) if container == "wav" else flac(recording)


@pytest.mark.slow  # three pieces a container, each a clip through the encoder and an answer
@pytest.mark.parametrize("container", ["wav", "flac", "mp3"])
def test_a_recording_longer_than_the_context_is_cut_at_its_silences(oai, hearing, container):
    recording = long_recording(container)
    logged = len(hearing.log_path.read_bytes())
    verbose = transcribe(oai, recording, f"talk.{container}", model=SMALL, response_format="verbose_json")
    spans = [(s.start, s.end) for s in verbose.segments]  # 3 windows of 125 positions: no one context holds them
    assert len(spans) == 3 and 28.0 <= spans[0][1] <= 29.5 and 56.5 <= spans[1][1] <= 58.0, spans
    assert spans[2][1] == pytest.approx(68.0, abs=0.05) and verbose.duration == pytest.approx(68.0, abs=0.05)
    assert all(s.text for s in verbose.segments) and verbose.segments[0].text != verbose.segments[1].text
    assert verbose.text == " ".join(s.text for s in verbose.segments)
    log = hearing.log_path.read_bytes()[logged:].decode(errors="replace")
    assert all(f"transcribe: window {i}/3 of {SMALL}:latest" in log for i in (1, 2, 3)), log[-2000:]
    with pytest.raises(openai.BadRequestError, match="context length of 512"):  # whole, it does not fit
        oai.chat.completions.create(model=SMALL, messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(recording).decode(),
                                                    "format": container}}]}])


@pytest.mark.slow  # three pieces, each a clip through the encoder and an answer
def test_a_long_recording_streams_a_segment_event_as_each_piece_ends(oai):
    events = list(transcribe(oai, long_recording("flac"), "talk.flac", model=SMALL, stream=True))
    segments = [(e.id, e.start, e.end, e.text) for e in events if e.type == "transcript.text.segment"]
    assert [s[0] for s in segments] == ["seg_0", "seg_1", "seg_2"] and segments[0][1] == 0.0
    assert 28.0 <= segments[0][2] <= 29.5 and segments[1][1] == segments[0][2] and segments[2][2] == 68.0
    deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
    assert events[-1].type == "transcript.text.done" and events[-1].text == deltas.strip()
    assert events[-1].text == " ".join(text for *_, text in segments if text)


def test_translations_answer_in_text(oai):
    # silence: a tone's translation runs on as "high high ..." up to the 448 tokens a piece may hold
    text = oai.audio.translations.create(model=HEARING, file=("clip.wav", wav(silence(12))),
                                         response_format="text")
    assert text.strip()


def test_bad_requests_are_400_naming_the_problem(hearing, oai):
    def form(files: dict | None = None, **data) -> httpx.Response:
        return httpx.post(f"{hearing.url}/v1/audio/transcriptions", data={"model": HEARING, **data}, files=files,
                          timeout=120)

    r = form()
    assert r.status_code == 400, r.text
    r = form(files={"other": ("x.wav", wav(silence(1)))})
    assert r.status_code == 400 and "'file' field is missing" in r.json()["error"]["message"]
    r = httpx.post(f"{hearing.url}/v1/audio/transcriptions", json={"model": HEARING, "file": "x"})
    assert r.status_code == 400 and "multipart/form-data" in r.json()["error"]["message"]
    cases = [
        ({"response_format": "mp4"}, wav(silence(1)), "invalid response_format 'mp4'"),
        ({"timestamp_granularities[]": "word", "response_format": "verbose_json"}, wav(silence(1)),
         "'word' is not available"),
        ({"stream": "true", "response_format": "srt"}, wav(silence(1)), "stream is supported with"),
        ({"temperature": "hot"}, wav(silence(1)), "temperature 'hot' is not a number"),
        ({"language": "english please"}, wav(silence(1)), "invalid language"),
        ({}, b"", "file is empty"),
        ({}, wav(tone(300, 2))[:-3000], "the file is truncated"),
        ({}, b"RIFF\x00\x00\x00\x00WAVEnot a wave file, a note", "no fmt chunk"),
        ({}, b"%PDF-1.7 a document", "not a WAV, MP3 or FLAC file"),
    ]
    for data, audio, problem in cases:
        r = form({"file": ("clip.wav", audio)}, **data)
        assert r.status_code == 400 and problem in r.json()["error"]["message"], (problem, r.text)
    with pytest.raises(openai.BadRequestError, match=f"'{TEXT_ONLY}' does not support audio"):
        transcribe(oai, wav(silence(1)), model=TEXT_ONLY)


def test_more_than_the_length_limit_is_400_naming_it(oai):
    rate = 1000  # the lowest rate taken keeps the upload small: 2 h 1 min of silence is 14.5 MB
    long = wav(silence(2 * 3600 + 60, rate=rate), rate=rate)
    with pytest.raises(openai.BadRequestError, match=re.escape("more than the limit of 120 minutes")):
        transcribe(oai, long)
    assert json.dumps(transcribe(oai, wav(tone(300, 2))).text)


def test_overlapping_pieces_are_stitched_where_their_words_repeat():
    from localllm.server.transcription import _after_overlap

    assert _after_overlap("we walked to the old mill", "the Old Mill, and then home") == "and then home"
    assert _after_overlap("we walked to the old mill", "and then home") == "and then home"
    assert _after_overlap("", "and then home") == "and then home"
    assert _after_overlap("yes", "yes") == ""


def test_a_models_own_num_predict_bounds_each_piece(hearing, oai, audio_projector_path):
    """Each piece's text is bounded by Whisper's 448 tokens, or by the Modelfile's num_predict where it is fewer
    (not silently raised back to 448)."""
    hearing.create("smolhearing-stt-brief", with_projector(audio_projector_path, num_ctx=1024, num_predict=3))
    events = list(transcribe(oai, wav(tone(300, 12)), model="smolhearing-stt-brief", stream=True))
    done = events[-1]
    assert done.type == "transcript.text.done" and done.text
    assert 0 < done.usage.output_tokens <= 3
