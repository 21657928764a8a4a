"""localllm.audio: containers told apart and their headers checked (generated files, good and bad), WAV read
back sample for sample, and long recordings cut at their silences."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from support.audio import RATE, b64, chirp, flac, mpeg_audio, silence, tone, wav

from support.images import picture

from localllm.audio import AudioClip, AudioError, MAX_SECONDS, check_audio, pieces, wav_bytes, wav_samples
from localllm.images import DecodedImage, ImageError
from localllm.media import decode_base64_media, input_audio_data


def test_generated_files_pass_with_what_their_headers_say():
    clip = check_audio(wav(tone(440, 1.5)))
    assert (clip.container, clip.sample_rate, clip.channels, clip.seconds) == ("wav", RATE, 1, 1.5)
    stereo = check_audio(wav(tone(440, 0.5, rate=44100), rate=44100, channels=2))
    assert (stereo.sample_rate, stereo.channels, stereo.seconds) == (44100, 2, 0.5)
    lossless = check_audio(flac(tone(300, 2.0)))
    assert (lossless.container, lossless.sample_rate, lossless.channels, lossless.seconds) == ("flac", RATE, 1, 2.0)
    assert check_audio(wav(tone(440, 1))).digest != check_audio(wav(tone(880, 1))).digest


def test_media_are_told_apart_by_their_bytes():
    assert isinstance(decode_base64_media(b64(wav(silence(0.5)))), AudioClip)
    assert isinstance(decode_base64_media(b64(picture("red"))), DecodedImage)
    with pytest.raises(ImageError, match="not a PNG"):
        decode_base64_media(b64(b"plain text, no image and no audio"))


def _riff(*chunks: tuple[bytes, bytes]) -> bytes:
    body = b"WAVE" + b"".join(kind + struct.pack("<I", len(data)) + data for kind, data in chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _fmt(tag: int = 1, channels: int = 1, rate: int = RATE, bits: int = 16) -> bytes:
    align = channels * bits // 8
    return struct.pack("<HHIIHH", tag, channels, rate, (rate * align) & 0xFFFFFFFF, align, bits)


def _unknown_length(flac_file: bytes) -> bytes:
    """``flac_file`` with STREAMINFO's total sample count 0, as a streaming encoder writes it."""
    info = bytearray(flac_file)
    packed = int.from_bytes(info[18:26], "big") & ~((1 << 36) - 1)
    info[18:26] = packed.to_bytes(8, "big")
    return bytes(info)


@pytest.mark.parametrize("raw, problem", [
    (b"", "empty"),
    (wav(tone(440, 1))[:30], "truncated"),
    (wav(tone(440, 1))[:-1000], "the file is truncated"),
    (b"RIFF\x00\x00\x00\x00WAVE" + b"this is not a wave file at all, only text" * 3, "no fmt chunk"),
    (_riff((b"fmt ", _fmt(rate=0)), (b"data", b"\x00\x00" * 100)), "claims 0 samples a second"),
    (_riff((b"fmt ", _fmt(rate=4_000_000_000)), (b"data", b"\x00\x00" * 100)), "claims 4000000000 samples"),
    (_riff((b"fmt ", _fmt(channels=1000)), (b"data", b"\x00" * 4000)), "claims 1000 channels"),
    (_riff((b"fmt ", _fmt(channels=0, bits=16)), (b"data", b"\x00" * 40)), "claims 0 channels"),
    (_riff((b"fmt ", _fmt(tag=2, bits=4)), (b"data", b"\x00" * 40)), "not one this server reads"),
    (_riff((b"fmt ", _fmt()), (b"data", b"")), "holds no samples"),
    (_riff((b"fmt ", _fmt())), "no data chunk"),
    (b"fLaC\x00\x00\x00\x22" + b"\x00" * 10, "truncated"),
    (b"fLaC\x04\x00\x00\x10" + b"\x00" * 60, "not STREAMINFO"),
    (_unknown_length(flac(tone(300, 1.0))), "does not state how many samples"),
    (b"ID3\x04\x00\x00\x00\x00\x00\x05" + b"\x00" * 5 + b"garbage, no frame", "not a valid MP3"),
    (b"\xff\xfb" + b"no mpeg frame follows this sync word" * 4, "not a valid MP3"),
    (b"hello", "not a WAV, MP3 or FLAC"),
])
def test_bad_files_are_named_errors(raw, problem):
    with pytest.raises(AudioError, match=problem):
        check_audio(raw, "file")


def test_a_length_over_the_limit_is_named():
    rate = 1000
    frames = (MAX_SECONDS + 60) * rate
    header = _riff((b"fmt ", _fmt(rate=rate)), (b"data", b""))[:-8]  # the data chunk's header written by hand
    raw = header + b"data" + struct.pack("<I", frames * 2) + bytes(frames * 2)
    with pytest.raises(AudioError, match=f"limit of {MAX_SECONDS // 60} minutes"):
        check_audio(raw, "file")


def test_an_mp3_over_the_length_limit_is_named_before_it_is_decoded():
    header = (0x7FF << 21) | (2 << 19) | (1 << 17) | (1 << 16) | (1 << 12) | (2 << 10) | (3 << 6)  # MPEG-2 L III
    frame = struct.pack(">I", header) + bytes(32)  # 8 kbit/s at 16 kHz: 36 bytes for 576 samples
    frames = (MAX_SECONDS + 60) * 16000 // 576
    with pytest.raises(AudioError, match=f"limit of {MAX_SECONDS // 60} minutes"):
        check_audio(frame * frames, "file")


def test_input_audio_must_be_what_its_format_says():
    assert input_audio_data({"data": b64(wav(silence(0.2))), "format": "wav"}) == b64(wav(silence(0.2)))
    with pytest.raises(AudioError, match="is not WAV audio as its format says \\(it is FLAC\\)"):
        input_audio_data({"data": b64(flac(silence(0.2))), "format": "wav"})
    with pytest.raises(AudioError, match="is not MP3 audio"):
        input_audio_data({"data": b64(picture("red")), "format": "mp3"})
    with pytest.raises(AudioError, match="format 'ogg' is not supported"):
        input_audio_data({"data": b64(wav(silence(0.2))), "format": "ogg"})
    with pytest.raises(AudioError, match="data is empty"):
        input_audio_data({"data": "", "format": "wav"})


def test_wav_reads_back_and_writes_again():
    signal = chirp(200, 4000, 1.0)
    samples, rate = wav_samples(wav(signal, channels=2))
    assert rate == RATE and len(samples) == len(signal)
    assert np.max(np.abs(samples - signal)) < 1e-3
    again, _ = wav_samples(wav_bytes(samples, rate))
    assert np.max(np.abs(again - samples)) < 1e-3
    mono = wav(signal)
    assert wav_bytes(*wav_samples(mono)) == mono  # a 16-bit file comes back bit for bit


def test_an_mp3_s_length_is_its_frames():
    clip = check_audio(mpeg_audio(3, 3.0))  # 375 Layer I frames of 384 samples at 48 kHz
    assert (clip.container, clip.sample_rate, clip.seconds) == ("mp3", 48000, 3.0)
    assert check_audio(mpeg_audio(3, 3.0) + b"TAG" + bytes(125)).seconds == 3.0  # an ID3v1 tag ends the frames


def test_long_recordings_are_cut_at_silences_or_overlap():
    speech_like = np.concatenate([tone(300, 27), silence(1.0), tone(500, 20)])
    cuts = pieces(speech_like, RATE)
    assert len(cuts) == 2 and 27.0 <= cuts[0].end <= 28.0 and not cuts[0].overlaps_next
    assert cuts[1].start == cuts[0].end and cuts[1].end == pytest.approx(48.0)
    unbroken = tone(300, 70)
    cuts = pieces(unbroken, RATE)
    assert [c.overlaps_next for c in cuts] == [True, True, False]
    assert cuts[1].start == pytest.approx(29.0) and all(c.end - c.start <= 30.0 for c in cuts)
    assert len(pieces(tone(300, 10), RATE)) == 1


@pytest.mark.parametrize("bits", [16, 32])
def test_reading_a_long_wav_holds_little_more_than_its_samples(bits):
    """A long recording's samples are what a transcription holds: read as float32 at once, not through a float64
    copy and two more float32 ones (a 2-hour file took ~2 GB at its peak)."""
    import tracemalloc

    n = RATE * 60
    pcm = (np.sin(np.arange(n) * 0.01) * (2 ** (bits - 2))).astype(f"<i{bits // 8}").tobytes()
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(pcm), b"WAVE", b"fmt ", 16, 1, 1, RATE,
                         RATE * bits // 8, bits // 8, bits, b"data", len(pcm))
    raw = header + pcm
    tracemalloc.start()
    try:
        samples, _ = wav_samples(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert samples.dtype == np.float32 and len(samples) == n
    assert peak < 6 * n, f"{peak / n:.1f} bytes a sample at the peak"
    expected = np.frombuffer(pcm, f"<i{bits // 8}") / float(1 << (bits - 1))
    assert np.array_equal(samples, expected.astype(np.float32))  # the same values as before, bit for bit
