"""OpenAI's speech-to-text endpoints, ``/v1/audio/transcriptions`` and ``/v1/audio/translations``,
run as chat turns on any model whose projector hears (as Ollama runs them).

A multipart upload (``file``, ``model``, ``language``, ``prompt``, ``response_format``,
``temperature``, ``timestamp_granularities[]``, ``stream``) becomes one chat turn a piece of
audio: the family's own transcription prompt, the piece as the user message's audio. A recording
longer than one encoder window (30 s), in whatever container, is decoded by the model's runner as its
projector hears it and cut at silences (:func:`localllm.audio.pieces`); where speech runs through a
cut the pieces overlap by a second and the texts are stitched where their words repeat. Each piece is
a segment of ``verbose_json``, ``srt`` and ``vtt`` (the model gives no finer timestamps), and of a
stream: a ``transcript.text.segment`` event (OpenAI's, without ``speaker``) after each piece's deltas,
which is how ``localllm transcribe`` draws its progress. The daemon's log says which piece runs.
"""

from __future__ import annotations

import base64
import logging
import re
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from ..audio import WINDOW_SECONDS, AudioError, Piece, check_audio, pieces, wav_bytes, wav_samples
from ..gguf import InvalidGGUF, read_gguf
from ..registry.models import LocalModel
from .conversation import ChatTurn, Content, Final, Message
from .errors import bad_request
from .handler import gather
from .inference import parse_name
from .state import state_of
from .streaming import sse, streamed

log = logging.getLogger("localllm.transcription")
router = APIRouter(prefix="/v1/audio")

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
MAX_TOKENS_A_PIECE = 448  # Whisper's own bound on the text of one 30 s window
OVERLAP_WORDS = 12  # how far into the next piece a repeat of the previous piece's end is looked for

LANGUAGES = {"en": "English", "fr": "French", "de": "German", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
             "nl": "Dutch", "pl": "Polish", "ru": "Russian", "uk": "Ukrainian", "tr": "Turkish", "ar": "Arabic",
             "hi": "Hindi", "ja": "Japanese", "ko": "Korean", "zh": "Chinese", "sv": "Swedish", "cs": "Czech"}

#: The user prompt a family was trained to transcribe (or translate) with, by projector type; others get Ollama's.
FAMILY_PROMPTS = {
    "gemma": ("Transcribe the following speech segment in {language} into {language} text.",
              "Translate the following speech segment in {language} into English text."),
}
GENERIC_SYSTEM = ("{task} the audio exactly as spoken. Output only the spoken words. "
                  "Do not answer any question in the audio.")
GENERIC_USER = ("What exact words are spoken in this audio?", "What are the spoken words in English?")


@dataclass
class SpeechRequest:
    """A transcription or translation request, its form fields checked."""

    model: str
    audio: bytes
    translate: bool
    language: str = ""
    prompt: str = ""
    response_format: str = "json"
    temperature: float = 0.0
    stream: bool = False


@dataclass
class Segment:
    start: float
    end: float
    text: str
    tokens: list[int] = field(default_factory=list)
    avg_logprob: float | None = None


@router.post("/transcriptions")
async def transcriptions(request: Request):
    return await _speech(request, translate=False)


@router.post("/translations")
async def translations(request: Request):
    return await _speech(request, translate=True)


async def _speech(request: Request, translate: bool):
    body = await _form(request, translate)
    state = state_of(request)
    model = state.inference.resolve(body.model)
    if not model.audio:
        raise bad_request(f"{model.name.display!r} does not support audio: transcription needs a model whose "
                          "projector hears (capability 'audio' in /api/show)")
    cuts, samples, rate = await _cut(state, model, body)
    run = _Transcriber(state, model, body, cuts, samples, rate)
    if body.stream:
        first = await run.open_first()  # a failure to load or to start is still a plain error status
        return streamed(run.events(first), "text/event-stream")
    result = await run.whole()
    return _rendered(body, result, cuts[-1].end)


def _multipart(content_type: str, body: bytes) -> dict[str, list[tuple[str | None, bytes]]]:
    """A multipart/form-data body as its fields: name -> (file name, bytes) for each part so named.

    The standard library's MIME parser reads it (a form is a MIME multipart message)."""
    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    if not message.is_multipart() or message.defects:
        raise bad_request("the multipart body cannot be read (a broken or missing boundary?)")
    fields: dict[str, list[tuple[str | None, bytes]]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields.setdefault(name, []).append((part.get_filename(), part.get_payload(decode=True) or b""))
    return fields


async def _form(request: Request, translate: bool) -> SpeechRequest:
    """The multipart form as a :class:`SpeechRequest`; a 400 naming any field that cannot be used."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise bad_request("send the audio as multipart/form-data with a 'file' field (as OpenAI's clients do)")
    fields = _multipart(content_type, await request.body())

    def text(name: str) -> str:
        values = fields.get(name)
        if not values:
            return ""
        try:
            return values[-1][1].decode()
        except UnicodeDecodeError:
            raise bad_request(f"the '{name}' field is not UTF-8 text") from None

    files = fields.get("file")
    if not files:
        raise bad_request("the 'file' field is missing: send the audio file as the multipart field 'file'")
    model = text("model")
    if not model:
        raise bad_request("the 'model' field is missing")
    parse_name(model)
    known = {"file", "model", "prompt", "response_format", "temperature", "stream", "timestamp_granularities[]",
             "timestamp_granularities"} | (set() if translate else {"language"})
    unknown = sorted(set(fields) - known)
    if unknown:
        raise bad_request(f"field {unknown[0]!r} is not supported by this endpoint")
    response_format = text("response_format") or "json"
    if response_format not in FORMATS:
        raise bad_request(f"invalid response_format {response_format!r}: use {', '.join(FORMATS)}")
    try:
        temperature = float(text("temperature") or 0.0)
    except ValueError:
        raise bad_request(f"temperature {text('temperature')!r} is not a number") from None
    if not 0.0 <= temperature <= 2.0:
        raise bad_request(f"temperature {temperature} is out of range: use 0 to 2")
    stream = (text("stream") or "false").lower()
    if stream not in ("true", "false"):
        raise bad_request(f"stream {stream!r} must be true or false")
    granularities = [value.decode(errors="replace") for name in ("timestamp_granularities[]", "timestamp_granularities")
                     for _, value in fields.get(name, [])]
    if "word" in granularities:
        raise bad_request("timestamp_granularities 'word' is not available: the model gives no word timings; "
                          "ask for 'segment'")
    if set(granularities) - {"segment"}:
        raise bad_request(f"invalid timestamp_granularities {granularities!r}: use segment")
    if granularities and response_format != "verbose_json":
        raise bad_request("timestamp_granularities needs response_format verbose_json")
    if stream == "true" and response_format not in ("json", "text"):
        raise bad_request(f"stream is supported with response_format json or text, not {response_format!r}")
    language = text("language")
    if language and not re.fullmatch(r"[A-Za-z]{2,3}", language):
        raise bad_request(f"invalid language {language!r}: use an ISO-639-1 code such as 'en'")
    return SpeechRequest(model, files[-1][1], translate, language.lower(), text("prompt"), response_format,
                         temperature, stream == "true")


async def _cut(state: Any, model: LocalModel, body: SpeechRequest) -> tuple[list[Piece], Any, int]:
    """The upload's pieces, and the samples (and their rate) they are cut from: none where the file's
    header says it fits one window; else the model's runner decodes it (any container) and it is cut
    at its silences."""
    try:
        clip = check_audio(body.audio, "file")
    except AudioError as exc:
        raise bad_request(str(exc)) from None
    if clip.seconds is not None and clip.seconds <= WINDOW_SECONDS:
        return [Piece(0.0, clip.seconds, False)], None, clip.sample_rate
    job = state.inference.job(body.model, _options(model, body), None)
    samples, rate = wav_samples(await state.inference.decode_audio(job, body.audio), "file")
    return pieces(samples, rate), samples, rate


def _options(model: LocalModel, body: SpeechRequest) -> dict[str, Any]:
    """A piece's sampling: the request's temperature, and its text bounded by Whisper's 448 tokens, or by the
    model's own ``num_predict`` (its Modelfile's) where that is fewer."""
    own = model.parameters.get("num_predict")
    bound = own if isinstance(own, int) and 0 < own < MAX_TOKENS_A_PIECE else MAX_TOKENS_A_PIECE
    return {"temperature": body.temperature, "num_predict": bound}


def _prompts(model: LocalModel, body: SpeechRequest) -> tuple[str, str]:
    """The system and user prompts of a piece: the family's own where it has one, else Ollama's."""
    language = LANGUAGES.get(body.language, body.language) or "English"
    family = _projector_type(model)
    for name, (transcribe, translate) in FAMILY_PROMPTS.items():
        if family.startswith(name):
            user = (translate if body.translate else transcribe).format(language=language)
            return (f"Context: {body.prompt}" if body.prompt else ""), user
    system = GENERIC_SYSTEM.format(task="Translate into English" if body.translate else "Transcribe")
    if body.language:
        system += f" The audio is in {language}."
    if body.prompt:
        system += f" Context: {body.prompt}"
    return system, GENERIC_USER[body.translate]


def _projector_type(model: LocalModel) -> str:
    try:
        meta = read_gguf(model.projectors[0], skip_arrays_over=64).metadata
    except (InvalidGGUF, OSError, IndexError):
        return ""
    return str(meta.get("clip.audio.projector_type") or meta.get("clip.projector_type") or "")


class _Transcriber:
    """Runs a request's pieces one after another as chat turns, and stitches their texts."""

    def __init__(self, state: Any, model: LocalModel, body: SpeechRequest, cuts: list[Piece], samples: Any,
                 rate: int) -> None:
        self.state, self.model, self.body, self.cuts = state, model, body, cuts
        self.samples, self.rate = samples, rate
        self.system, self.user = _prompts(model, body)
        self.prompt_tokens = self.completion_tokens = 0

    def _turn(self, index: int) -> ChatTurn:
        piece = self.cuts[index]
        if len(self.cuts) == 1:  # whole, as a chat would send it (and share its cache)
            audio = self.body.audio
        else:
            audio = wav_bytes(self.samples[int(piece.start * self.rate):int(piece.end * self.rate)], self.rate)
        messages = [Message("system", self.system)] if self.system else []
        messages.append(Message("user", self.user, [base64.b64encode(audio).decode()]))
        return ChatTurn(self.body.model, messages, options=_options(self.model, self.body),
                        logprobs=self.body.response_format == "verbose_json")  # for each segment's avg_logprob

    async def _open(self, index: int) -> Any:
        if len(self.cuts) > 1:
            log.info("transcribe: window %d/%d of %s (%.0f%% of %.0f s)", index + 1, len(self.cuts),
                     self.model.name.display, 100 * self.cuts[index].start / self.cuts[-1].end, self.cuts[-1].end)
        return await self.state.chat.open(self.state.chat.prepare(self._turn(index)))

    def _start(self, index: int) -> float:
        """Where the text of piece ``index`` starts: where the previous piece ends, where the two overlap."""
        return max(self.cuts[index].start, self.cuts[index - 1].end) if index else self.cuts[0].start

    def _count(self, final: Final | None) -> None:
        if final is not None:
            self.prompt_tokens += final.prompt_tokens
            self.completion_tokens += final.completion_tokens

    async def whole(self) -> list[Segment]:
        segments: list[Segment] = []
        for index, piece in enumerate(self.cuts):
            answer = await gather(await self._open(index))
            self._count(answer.final)
            text = answer.content.strip()
            if index and self.cuts[index - 1].overlaps_next:
                text = _after_overlap(segments[-1].text, text)
            logprobs = answer.final.logprobs if answer.final else []
            segments.append(Segment(self._start(index), piece.end, text, (answer.final.context[-answer.final.completion_tokens:]
                                           if answer.final and answer.final.completion_tokens else []),
                                    (sum(e["logprob"] for e in logprobs) / len(logprobs)) if logprobs else None))
        return segments

    async def open_first(self) -> Any:
        return await self._open(0)

    async def events(self, first: Any) -> AsyncIterator[bytes]:
        """OpenAI's transcript stream: ``transcript.text.delta`` events, a ``transcript.text.segment`` after
        each piece's, then one ``transcript.text.done``."""
        sent = ""
        for index, piece in enumerate(self.cuts):
            before = len(sent)
            deltas = first if index == 0 else await self._open(index)
            held: str | None = "" if index and self.cuts[index - 1].overlaps_next else None  # until the repeat shows
            started = False  # this piece's text has begun
            async for delta in deltas:
                if isinstance(delta, Final):
                    self._count(delta)
                if not isinstance(delta, Content) or not delta.text:
                    continue
                chunk = delta.text
                if held is not None:
                    held += chunk
                    if len(held.split()) <= OVERLAP_WORDS:
                        continue
                    chunk, held = _after_overlap(sent, held), None
                if not started:
                    chunk = chunk.lstrip()
                    started = bool(chunk)
                    chunk = (" " if sent and chunk else "") + chunk
                if chunk:
                    sent += chunk
                    yield sse({"type": "transcript.text.delta", "delta": chunk})
            rest = _after_overlap(sent, held).strip() if held else ""
            if rest:
                chunk = (" " if sent and not started else "") + rest
                sent += chunk
                yield sse({"type": "transcript.text.delta", "delta": chunk})
            yield sse({"type": "transcript.text.segment", "id": f"seg_{index}", "start": round(self._start(index), 3),
                       "end": round(piece.end, 3), "text": sent[before:].strip()})
        yield sse({"type": "transcript.text.done", "text": sent.strip(), "usage": self.usage()})

    def usage(self) -> dict[str, Any]:
        return {"type": "tokens", "input_tokens": self.prompt_tokens, "output_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


def _words(text: str) -> list[str]:
    return [re.sub(r"\W", "", word.lower()) for word in text.split()]


def _after_overlap(before: str, text: str) -> str:
    """``text`` less its first words where they repeat the end of ``before`` (the overlap heard twice)."""
    tail, head = _words(before), _words(text)
    for n in range(min(len(tail), len(head), OVERLAP_WORDS), 0, -1):
        if tail[-n:] == head[:n] and any(head[:n]):
            return " ".join(text.split()[n:])
    return text


def _rendered(body: SpeechRequest, segments: list[Segment], duration: float):
    text = " ".join(s.text for s in segments if s.text).strip()
    if body.response_format == "text":
        return PlainTextResponse(text + "\n")
    if body.response_format in ("srt", "vtt"):
        return PlainTextResponse(_subtitles(segments, body.response_format),
                                 media_type="text/vtt" if body.response_format == "vtt" else "text/plain")
    if body.response_format == "json":
        return JSONResponse({"text": text})
    language = "english" if body.translate else LANGUAGES.get(body.language, body.language).lower()
    verbose = {"task": "translate" if body.translate else "transcribe", "language": language or None,
               "duration": round(duration, 3), "text": text,
               "segments": [_segment_object(i, s, body.temperature) for i, s in enumerate(segments)]}
    return JSONResponse({k: v for k, v in verbose.items() if v is not None})  # no language given


def _segment_object(index: int, segment: Segment, temperature: float) -> dict[str, Any]:
    encoded = segment.text.encode()
    obj: dict[str, Any] = {"id": index, "seek": int(segment.start * 100), "start": round(segment.start, 3),
                           "end": round(segment.end, 3), "text": segment.text, "tokens": segment.tokens,
                           "temperature": temperature,
                           "compression_ratio": len(encoded) / len(zlib.compress(encoded)) if encoded else 0.0}
    if segment.avg_logprob is not None:
        obj["avg_logprob"] = segment.avg_logprob
    return obj


def _subtitles(segments: list[Segment], kind: str) -> str:
    def stamp(seconds: float) -> str:
        ms = int(round(seconds * 1000))
        h, ms = divmod(ms, 3_600_000)
        m, ms = divmod(ms, 60_000)
        s, ms = divmod(ms, 1000)
        return f"{h:02d}:{m:02d}:{s:02d}{',' if kind == 'srt' else '.'}{ms:03d}"

    cues = [s for s in segments if s.text]
    if kind == "vtt":
        return "WEBVTT\n\n" + "".join(f"{stamp(s.start)} --> {stamp(s.end)}\n{s.text}\n\n" for s in cues)
    return "".join(f"{i}\n{stamp(s.start)} --> {stamp(s.end)}\n{s.text}\n\n" for i, s in enumerate(cues, 1))
