"""Audio for the hearing tests: generated signals (tones, silence, a chirp) written as WAV (the
standard library's ``wave``) or FLAC (a verbatim-subframe encoder below, no library needed), and a
tiny Voxtral-style audio projector for a language model that libmtmd loads and that really
listens: it tells low tones from high tones from silence."""

from __future__ import annotations

import base64
import io
import struct
import wave
from pathlib import Path

import numpy as np

RATE = 16000  # what Whisper-style encoders take; files at other rates are resampled by libmtmd
PROJECTOR_WORDS = ("low", "high", "quiet")  # what the projector writes for a low tone, a high tone, silence
SPLIT_BIN = 40  # mel bins below it count as low (about 1.1 kHz), above it as high


def tone(freq: float, seconds: float, rate: int = RATE, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def silence(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(int(seconds * rate), np.float32)


def chirp(f0: float, f1: float, seconds: float, rate: int = RATE, amplitude: float = 0.5) -> np.ndarray:
    """A sweep from ``f0`` to ``f1`` Hz (linear in frequency)."""
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * seconds)))).astype(np.float32)


def wav(samples: np.ndarray, rate: int = RATE, channels: int = 1) -> bytes:
    """16-bit PCM WAV; with ``channels`` > 1 the signal is repeated in each channel."""
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(pcm, channels).tobytes())
    return out.getvalue()


def flac(samples: np.ndarray, rate: int = RATE, block: int = 4096) -> bytes:
    """16-bit mono FLAC with verbatim subframes (valid FLAC, no compression): CRCs and all."""
    pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
    total = len(pcm)
    streaminfo = struct.pack(">HH", block, block) + b"\x00\x00\x00" * 2
    streaminfo += ((rate << 44) | (0 << 41) | (15 << 36) | total).to_bytes(8, "big") + b"\x00" * 16
    out = bytearray(b"fLaC" + bytes([0x80]) + len(streaminfo).to_bytes(3, "big") + streaminfo)
    for index, start in enumerate(range(0, total, block)):
        chunk = pcm[start:start + block]
        header = bytearray([0xFF, 0xF8, 0x70, 0x08])  # block size from the end, rate from STREAMINFO; mono, 16-bit
        header += _utf8_number(index) + (len(chunk) - 1).to_bytes(2, "big")
        header.append(_crc8(header))
        frame = header + b"\x02" + chunk.astype(">i2").tobytes()  # subframe: verbatim, no wasted bits
        frame += _crc16(frame).to_bytes(2, "big")
        out += frame
    return bytes(out)


def mpeg_audio(band: int | None, seconds: float, rate: int = 48000, level: float = 0.5) -> bytes:
    """An MPEG-1 audio stream (Layer I: what MP3 decoders read besides Layer III, and simple enough to
    write here) that holds a steady signal in one of the 32 subbands, so a tone around
    ``(band + 0.5) * rate / 64`` Hz; ``band=None`` writes silence. Mono, 64 kbit/s."""
    bits_per_sample = 15  # allocation 14
    half = (1 << (bits_per_sample - 1)) - 1
    frame_bytes = 12 * 64000 // rate * 4
    rate_index = {44100: 0, 48000: 1, 32000: 2}[rate]
    header = (0x7FF << 21) | (3 << 19) | (3 << 17) | (1 << 16) | (2 << 12) | (rate_index << 10) | (3 << 6)  # mono
    frames = []
    for _ in range(int(seconds * rate / 384)):
        fields: list[tuple[int, int]] = [(header, 32)]
        fields += [((bits_per_sample - 1) if sb == band else 0, 4) for sb in range(32)]
        if band is not None:
            fields.append((3, 6))  # scale factor index 3: 1.0
            fields += [(round(level * half) + half, bits_per_sample)] * 12
        value, width = 0, 0
        for field_value, field_width in fields:
            value, width = (value << field_width) | field_value, width + field_width
        value <<= frame_bytes * 8 - width
        frames.append(value.to_bytes(frame_bytes, "big"))
    return b"".join(frames)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _utf8_number(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    if n < 0x800:
        return bytes([0xC0 | n >> 6, 0x80 | n & 0x3F])
    return bytes([0xE0 | n >> 12, 0x80 | (n >> 6) & 0x3F, 0x80 | n & 0x3F])


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def tone_projector(path: Path, language_model: Path, n_mel: int = 80) -> Path:
    """A Voxtral-style audio projector GGUF for ``language_model`` that libmtmd loads: a Whisper
    encoder (two convolutions, one transformer block whose weights are zero, so it passes its input
    through) and a two-layer MLP. The first convolution measures, per mel frame, how much more
    energy the low half of the spectrum holds than the high half (log-mel values, so loudness
    cancels); the MLP turns "low", "high" or neither into the language model's own embedding of the
    word (PROJECTOR_WORDS). Each output position covers 240 ms (125 a 30 s window); a clip reads to the model as
    "low low ... quiet quiet" (libmtmd pads every clip to 30 s of audio, which reads as quiet)."""
    from gguf import GGUFReader, GGUFWriter
    from gguf.quants import dequantize

    reader = GGUFReader(language_model)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    vocab = {bytes(tokens.parts[i]).decode(): n for n, i in enumerate(tokens.data)}
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    table = dequantize(embd.data, embd.tensor_type)  # [n_vocab, n_embd]
    words = np.stack([table[vocab["\u0120" + word]] for word in PROJECTOR_WORDS])
    n_embd_out = table.shape[1]

    hidden, n_ff, stack, n_pos = 8, 16, 6, 1500  # stack 6: 750 pooled frames make 125 positions, evenly
    w = GGUFWriter(str(path), "clip")
    w.add_bool("clip.has_audio_encoder", True)
    w.add_string("clip.projector_type", "voxtral")
    w.add_uint32("clip.audio.embedding_length", hidden)
    w.add_uint32("clip.audio.feed_forward_length", n_ff)
    w.add_uint32("clip.audio.block_count", 1)
    w.add_uint32("clip.audio.attention.head_count", 1)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.audio.projection_dim", n_embd_out)
    w.add_uint32("clip.audio.num_mel_bins", n_mel)
    w.add_uint32("clip.audio.projector.stack_factor", stack)
    w.add_file_type(0)  # F32

    # conv 1 (kernel 3, its centre tap only): channel 0 = sum(low bins) - sum(high bins) - 1, channel 1 the
    # opposite, channel 2 a constant 2 (the biases the projector's bias-free MLP needs)
    conv1 = np.zeros((hidden, n_mel, 3), np.float32)
    conv1[0, :SPLIT_BIN, 1], conv1[0, SPLIT_BIN:, 1] = 1.0, -1.0
    conv1[1] = -conv1[0]
    w.add_tensor("a.conv1d.1.weight", conv1.astype(np.float16))
    w.add_tensor("a.conv1d.1.bias", np.array([[-1], [-1], [2]] + [[0]] * (hidden - 3), np.float32))
    conv2 = np.zeros((hidden, hidden, 3), np.float32)  # the identity (stride 2: every other frame)
    for c in range(3):
        conv2[c, c, 1] = 1.0
    w.add_tensor("a.conv1d.2.weight", conv2.astype(np.float16))
    w.add_tensor("a.conv1d.2.bias", np.zeros((hidden, 1), np.float32))
    w.add_tensor("a.position_embd.weight", np.zeros((n_pos, hidden), np.float32))
    blk = "a.blk.0."
    for name, rows, cols, bias in (("attn_q", hidden, hidden, True), ("attn_k", hidden, hidden, False),
                                   ("attn_v", hidden, hidden, True), ("attn_out", hidden, hidden, True),
                                   ("ffn_up", n_ff, hidden, True), ("ffn_down", hidden, n_ff, True)):
        w.add_tensor(f"{blk}{name}.weight", np.zeros((rows, cols), np.float32))
        if bias:
            w.add_tensor(f"{blk}{name}.bias", np.zeros(rows, np.float32))
    for norm in ("ln1", "ln2"):
        w.add_tensor(f"{blk}{norm}.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"{blk}{norm}.bias", np.zeros(hidden, np.float32))
    # mm 1 scores the stacked frames (6 of them, each [low, high, const, ...]): low, high, neither
    level = 1.9  # channel 2 after two GELUs: gelu(gelu(2))
    scores = np.zeros((n_ff, hidden * stack), np.float32)
    for k in range(stack):
        scores[0, k * hidden:k * hidden + 3] = [0.5, -0.5, -0.25 / level]
        scores[1, k * hidden:k * hidden + 3] = [-0.5, 0.5, -0.25 / level]
        scores[2, k * hidden:k * hidden + 3] = [-0.5, -0.5, 0.5 / level]
    w.add_tensor("mm.a.mlp.1.weight", scores)
    # mm 2 writes each word's embedding, scaled so that a clear score reads as about the word itself
    # (the scores a 300 Hz tone, a 3 kHz tone and silence reach, measured through libmtmd)
    out = np.zeros((n_embd_out, n_ff), np.float32)
    out[:, :3] = (words / np.array([[55.0], [7.4], [3.4]])).T
    w.add_tensor("mm.a.mlp.2.weight", out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
