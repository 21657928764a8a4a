"""Audio as clients send it (WAV, MP3 or FLAC bytes) checked before libmtmd decodes it.

libmtmd's helper decodes these three containers (through miniaudio), mixes them
down to mono and resamples them to the rate the projector wants; this module
adds what a server needs before a stranger's file reaches that decoder: the
container told apart by its first bytes (as libmtmd tells audio from images),
its header read and bounded (a sample rate of zero or four billion, a
thousand channels, a WAV whose data chunk runs past the file's end), and one
error type whose message names the problem. WAV is also read here into samples
(:func:`wav_samples`): the transcription endpoints have the model's runner decode
any container into a WAV at the projector's rate, and cut that at silences
(:func:`pieces`).

Audio travels where images do (Ollama's ``images`` field carries both, and so
do our requests to the runner): :mod:`localllm.media` tells them apart.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np

MAX_BYTES = 256 << 20  # of an encoded clip: an hour of 16 kHz 16-bit WAV is 115 MB
MAX_SECONDS = 2 * 3600  # of audio in one request (a chat's clip, or a file to transcribe)
MIN_RATE, MAX_RATE = 1000, 384_000  # samples a second a header may claim
MAX_CHANNELS = 8
WINDOW_SECONDS = 30.0  # the longest piece a long recording is cut into: a Whisper-style encoder's window
FORMATS = {"wav": "WAV", "mp3": "MP3", "flac": "FLAC"}  # OpenAI's input_audio ``format`` names
MEDIA_TYPES = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/vnd.wave": "wav",
               "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/flac": "flac", "audio/x-flac": "flac"}

_WAV_PCM, _WAV_FLOAT, _WAV_ALAW, _WAV_MULAW, _WAV_EXTENSIBLE = 1, 3, 6, 7, 0xFFFE
_MP3_BITRATES_KBPS = {  # (MPEG-1?, layer) -> kbit/s by index 1..14
    (True, 1): (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}  # by version bits


class AudioError(ValueError):
    """Audio that cannot be used; the message names the problem."""


@dataclass(frozen=True)
class AudioClip:
    """An audio file whose header was checked: its bytes (for libmtmd's decoder) and what the header says."""

    data: bytes
    container: str  # "wav", "mp3" or "flac"
    sample_rate: int
    channels: int
    seconds: float | None  # None where a FLAC header does not say
    digest: str  # sha256 of the file: equal clips share KV, different ones never


def container_of(raw: bytes) -> str | None:
    """``"wav"``, ``"mp3"`` or ``"flac"`` when ``raw`` starts as one (libmtmd's own test), else None."""
    if raw[:4] == b"RIFF" and raw[8:12] == b"WAVE":
        return "wav"
    if raw[:4] == b"fLaC":
        return "flac"
    if raw[:3] == b"ID3" or (len(raw) >= 2 and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def is_audio(raw: bytes) -> bool:
    """Whether libmtmd would take ``raw`` for audio rather than an image."""
    return container_of(raw) is not None


def check_audio(raw: bytes, what: str = "audio") -> AudioClip:
    """``raw`` as an :class:`AudioClip` after its header's checks, or an :class:`AudioError`."""
    if not raw:
        raise AudioError(f"{what} is empty (zero bytes)")
    if len(raw) > MAX_BYTES:
        raise AudioError(f"{what} is {len(raw)} bytes, more than the limit of {MAX_BYTES}")
    container = container_of(raw)
    if container is None:
        raise AudioError(f"{what} is not a WAV, MP3 or FLAC file")
    reader = {"wav": _wav_header, "mp3": _mp3_header, "flac": _flac_header}[container]
    try:
        rate, channels, seconds = reader(raw)
    except (struct.error, IndexError):
        raise AudioError(f"{what}: the {FORMATS[container]} header is truncated") from None
    except AudioError as exc:
        raise AudioError(f"{what}: {exc}") from None
    if not MIN_RATE <= rate <= MAX_RATE:
        raise AudioError(f"{what}: its {FORMATS[container]} header claims {rate} samples a second; "
                         f"{MIN_RATE} to {MAX_RATE} are taken")
    if not 1 <= channels <= MAX_CHANNELS:
        raise AudioError(f"{what}: its {FORMATS[container]} header claims {channels} channels; "
                         f"1 to {MAX_CHANNELS} are taken")
    if seconds is not None:
        check_length(seconds, what)
    return AudioClip(raw, container, rate, channels, seconds, hashlib.sha256(raw).hexdigest())


def check_length(seconds: float, what: str = "audio") -> None:
    """An :class:`AudioError` for audio longer than :data:`MAX_SECONDS`."""
    if seconds > MAX_SECONDS:
        raise AudioError(f"{what} is {seconds / 60:.1f} minutes long, more than the limit of "
                         f"{MAX_SECONDS // 60} minutes of audio a request")


# --- WAV -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WavFormat:
    tag: int
    channels: int
    rate: int
    bits: int
    data: memoryview  # the sample bytes


def _wav(raw: bytes) -> _WavFormat:
    """The fmt and data chunks of a RIFF WAVE file; AudioError for one that is not whole."""
    fmt, data, pos = None, None, 12
    while pos + 8 <= len(raw) and data is None:
        kind, size = raw[pos:pos + 4], struct.unpack_from("<I", raw, pos + 4)[0]
        body = pos + 8
        if kind == b"fmt ":
            if size < 16 or body + size > len(raw):
                raise AudioError("its WAV fmt chunk is truncated")
            tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", raw, body)
            if tag == _WAV_EXTENSIBLE and size >= 40:
                tag = struct.unpack_from("<H", raw, body + 24)[0]  # the sub-format GUID's first two bytes
            fmt = (tag, channels, rate, bits, align)
        elif kind == b"data":
            if fmt is None:
                raise AudioError("its WAV data chunk comes before the fmt chunk")
            end = len(raw) if size in (0, 0xFFFFFFFF) else body + size  # a streamed WAV leaves its size open
            if end > len(raw):
                raise AudioError(f"its WAV data chunk claims {size} bytes but the file ends after "
                                 f"{len(raw) - body}: the file is truncated")
            data = memoryview(raw)[body:end]
        pos = body + size + (size & 1)
    if fmt is None:
        raise AudioError("it says RIFF WAVE but has no fmt chunk: not a WAV file, or a truncated one")
    if data is None:
        raise AudioError("its WAV file has no data chunk: truncated?")
    tag, channels, rate, bits, align = fmt
    supported = {_WAV_PCM: (8, 16, 24, 32), _WAV_FLOAT: (32, 64), _WAV_ALAW: (8,), _WAV_MULAW: (8,)}
    if bits not in supported.get(tag, ()):
        raise AudioError(f"its WAV encoding (format {tag}, {bits} bits a sample) is not one this server reads "
                         "(PCM of 8, 16, 24 or 32 bits, or 32- or 64-bit float)")
    if channels and align != channels * bits // 8:
        raise AudioError(f"its WAV header is inconsistent (block align {align} for {channels} channels of {bits} bits)")
    if channels and len(data) < align:
        raise AudioError("its WAV file holds no samples")
    return _WavFormat(tag, channels, rate, bits, data)


def _wav_header(raw: bytes) -> tuple[int, int, float | None]:
    wav = _wav(raw)
    frames = len(wav.data) // max(1, wav.channels * wav.bits // 8)
    return wav.rate, wav.channels, frames / wav.rate if wav.rate else None


def wav_samples(raw: bytes, what: str = "audio") -> tuple[np.ndarray, int]:
    """A checked WAV file's samples, mixed down to mono float32 in [-1, 1], and its sample rate."""
    check_audio(raw, what)
    wav = _wav(raw)
    frames = len(wav.data) // (wav.channels * wav.bits // 8)
    data = wav.data[: frames * wav.channels * wav.bits // 8]
    if wav.tag == _WAV_FLOAT:
        samples = np.frombuffer(data, "<f4" if wav.bits == 32 else "<f8").astype(np.float32)
        samples = np.nan_to_num(samples, copy=False, nan=0.0, posinf=1.0, neginf=-1.0)  # integers hold none
    elif wav.tag in (_WAV_ALAW, _WAV_MULAW):
        raise AudioError(f"{what}: A-law and mu-law WAV files can be sent in a chat but not transcribed here; "
                         "convert it to PCM")
    elif wav.bits == 8:
        samples = (np.frombuffer(data, np.uint8).astype(np.float32) - 128) / 128
    elif wav.bits == 24:
        bytes3 = np.frombuffer(data, np.uint8).reshape(-1, 3).astype(np.int32)
        values = bytes3[:, 0] | (bytes3[:, 1] << 8) | (bytes3[:, 2] << 16)
        samples = (np.where(values >= 1 << 23, values - (1 << 24), values) / float(1 << 23)).astype(np.float32)
    else:  # scaled in float32 (exact: a power of two), so an hour's samples are held once, not in float64
        samples = np.frombuffer(data, "<i2" if wav.bits == 16 else "<i4").astype(np.float32)
        samples *= np.float32(1.0 / (1 << (wav.bits - 1)))
    if wav.channels == 1:
        return samples, wav.rate
    return samples.reshape(-1, wav.channels).mean(axis=1, dtype=np.float32), wav.rate


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """Mono float samples in [-1, 1] as a 16-bit PCM WAV file (the scale :func:`wav_samples` reads 16 bits
    with, so a 16-bit file read and written again is the same file)."""
    pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2").tobytes()
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(pcm), b"WAVE", b"fmt ", 16, _WAV_PCM, 1, rate,
                         rate * 2, 2, 16, b"data", len(pcm))
    return header + pcm


# --- MP3 and FLAC headers -------------------------------------------------------------


def _mp3_header(raw: bytes) -> tuple[int, int, float]:
    """The first MPEG audio frame's rate and channels (after an ID3v2 tag), and the length of the frames
    that follow one another from there (a decoder stops where they stop: at a trailing tag, or junk).
    One frame can look like a header by chance; two in a row do not."""
    pos = 0
    if raw[:3] == b"ID3":
        size = raw[6] << 21 | raw[7] << 14 | raw[8] << 7 | raw[9]
        pos = 10 + size + (10 if raw[5] & 0x10 else 0)
    rate, channels, length, samples = _mp3_frame(raw, pos)
    if pos + length + 4 <= len(raw):
        _mp3_frame(raw, pos + length)
    total, limit = 0, MAX_SECONDS * rate  # past the limit the count stops: the length check refuses it anyway
    while total <= limit:
        total += samples
        pos += length
        if pos + 4 > len(raw):
            break
        try:
            _, _, length, samples = _mp3_frame(raw, pos)
        except AudioError:
            break
    return rate, channels, total / rate


def _mp3_frame(raw: bytes, pos: int) -> tuple[int, int, int, int]:
    """The MPEG audio frame at ``pos``: its rate, channels, length in bytes and samples."""
    if pos + 4 > len(raw):
        raise AudioError("its MP3 data ends before the first frame: the file is empty or truncated")
    header = struct.unpack_from(">I", raw, pos)[0]
    version, layer_bits = (header >> 19) & 3, (header >> 17) & 3
    bitrate_index, rate_index = (header >> 12) & 15, (header >> 10) & 3
    if header >> 21 != 0x7FF or version == 1 or layer_bits == 0 or bitrate_index in (0, 15) or rate_index == 3:
        raise AudioError("it is not a valid MP3 file (no MPEG audio frame where one should start)")
    layer = 4 - layer_bits
    rate = _MP3_RATES[version][rate_index]
    kbps = _MP3_BITRATES_KBPS[(version == 3, layer)][bitrate_index - 1]
    padding = (header >> 9) & 1
    if layer == 1:
        length, samples = (12 * kbps * 1000 // rate + padding) * 4, 384
    else:
        per_frame = 144 if version == 3 or layer == 2 else 72
        length, samples = per_frame * kbps * 1000 // rate + padding, per_frame * 8
    channels = 1 if (header >> 6) & 3 == 3 else 2
    return rate, channels, length, samples


def _flac_header(raw: bytes) -> tuple[int, int, float | None]:
    """STREAMINFO, the first metadata block every FLAC file starts with."""
    kind, size = raw[4] & 0x7F, int.from_bytes(raw[5:8], "big")
    if kind != 0 or size < 34:
        raise AudioError("it starts as FLAC but its first block is not STREAMINFO: not a FLAC file")
    info = raw[8:42]
    if len(info) < 34:
        raise AudioError("its FLAC header is truncated")
    packed = int.from_bytes(info[10:18], "big")  # rate:20 channels-1:3 bits-1:5 total:36
    rate, channels, total = packed >> 44, ((packed >> 41) & 7) + 1, packed & ((1 << 36) - 1)
    if len(raw) <= 42:
        raise AudioError("its FLAC file holds no audio frames (truncated?)")
    if total == 0:  # a streamed FLAC: the decoder reads such a file as no samples at all
        raise AudioError("its FLAC header does not state how many samples it holds (a streamed FLAC); "
                         "write it again as a whole file, e.g. `ffmpeg -i in.flac out.flac`")
    return rate, channels, total / rate if rate else None


# --- long recordings -------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """A stretch of a recording: where it starts and ends (seconds), and whether it overlaps the next."""

    start: float
    end: float
    overlaps_next: bool


def pieces(samples: np.ndarray, rate: int, window: float = WINDOW_SECONDS, search: float = 5.0,
           overlap: float = 1.0) -> list[Piece]:
    """``samples`` cut into pieces of at most ``window`` seconds, each cut at the quietest 50 ms of
    the last ``search`` seconds before the window ends. Where even that is not quiet (speech runs
    through), the cut goes at the window's end and the next piece starts ``overlap`` seconds
    earlier, so no word is lost in the cut; the caller stitches the overlapping texts."""
    total = len(samples) / rate
    step = max(1, rate // 100)
    energy = _loudness(samples, step)  # a value each step (10 ms)
    steps = rate / step  # a second's steps
    quiet = max(float(energy.max(initial=0.0)) * 0.03, 1e-4)  # 30 dB under the loudest stretch, or plain silence
    result: list[Piece] = []
    start = 0.0
    while total - start > window:
        lo, hi = int((start + window - search) * steps), int((start + window) * steps)
        at = lo + int(np.argmin(energy[lo:hi]))
        if energy[at] <= quiet:
            result.append(Piece(start, at / steps, False))
            start = at / steps
        else:
            result.append(Piece(start, start + window, True))
            start = start + window - overlap
    result.append(Piece(start, total, False))
    return result


def _loudness(samples: np.ndarray, step: int) -> np.ndarray:
    """The RMS level of ``samples`` over five steps around each ``step`` samples (an hour's
    recording in a few megabytes, with no copy of the samples)."""
    frames = samples[: len(samples) // step * step].reshape(-1, step)
    power = np.einsum("ij,ij->i", frames, frames, dtype=np.float64) / step
    return np.sqrt(np.convolve(power, np.ones(5) / 5, mode="same"))
