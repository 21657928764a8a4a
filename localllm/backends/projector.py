"""Images and audio into a llama.cpp model through libmtmd (llama-cpp-python's ``mtmd_cpp`` bindings).

A vision (or hearing) model is a language model plus a projector GGUF (Ollama's
``application/vnd.ollama.image.projector`` layer, llama.cpp's ``--mmproj``).
libmtmd tokenizes a prompt whose images and audio clips stand at media markers
into text chunks and media chunks; a media chunk is encoded by the projector
into embeddings that are decoded into the sequence's KV like tokens. Audio is
decoded (WAV, MP3, FLAC), mixed to mono and resampled by libmtmd's helper, and
cut by its preprocessor into windows (30 s for Whisper-style encoders), each
window a chunk of its own.

The engine keeps prompts as token lists, so each media chunk is written into the
list as a run of *placeholder* tokens: negative ids (never a vocabulary id)
drawn from its content digest, one per position it takes (an audio clip's
windows each draw from the clip's digest and the window's index).
The prefix cache then treats images like text: the same image in the next
turn matches its placeholders and reuses its KV; two different images have
different runs (each placeholder carries 31 other bits of the sha256), so
they never share KV.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as ll
import llama_cpp.mtmd_cpp as mtmd
import numpy as np

from localllm.audio import AudioClip, check_length
from localllm.images import MARKER, DecodedImage
from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Context, Model, _detail, _on_log, captured_errors

log = logging.getLogger("localllm.runner")

MIN_AUDIO_SAMPLES = 160  # 10 ms at 16 kHz: libmtmd's preprocessor asserts on a clip of one sample


def is_placeholder(token: int) -> bool:
    """Whether ``token`` stands for a position of an image or audio clip rather than a vocabulary token."""
    return token < 0


def placeholders(digest: str, n: int) -> list[int]:
    """The ``n`` placeholder tokens of the image with sha256 ``digest``: each negative and nonzero,
    the k-th made of bits of the digest starting at bit 31 * k (wrapping round)."""
    bits = int(digest, 16)
    bits = (bits << 256) | bits  # wrap round: a run longer than 8 tokens reuses the digest's bits, shifted
    return [-1 - ((bits >> ((31 * k) % 256)) & 0x7FFFFFFF) for k in range(n)]


@dataclass(eq=False)
class ImageChunk:
    """One image (or one window of an audio clip), preprocessed by libmtmd, ready to encode and decode
    (owns its native chunk)."""

    ptr: int  # mtmd_input_chunk *
    n_tokens: int  # KV cells it takes in the sequence (its placeholder tokens)
    digest: str
    n_pos: int = 0  # positions it advances the sequence by: n_tokens, fewer for an M-RoPE image (its 2D grid's side)

    def close(self) -> None:
        if self.ptr:
            mtmd.mtmd_input_chunk_free(self.ptr)
            self.ptr = 0


class ImagePrompt:
    """A prompt tokenized with its media: tokens (placeholders for images and audio) and each media
    chunk, keyed by its first placeholder (each slice of a sliced image, and each repeat of an image, its own)."""

    def __init__(self, tokens: list[int], images: dict[int, ImageChunk]) -> None:
        self.tokens = tokens
        self.images = images

    def take_images(self) -> dict[int, ImageChunk]:
        """The image chunks, now the caller's to free."""
        images, self.images = self.images, {}
        return images

    def close(self) -> None:
        for chunk in self.take_images().values():
            chunk.close()


class Projector:
    """A loaded projector (``mtmd_context``) bound to its language model."""

    def __init__(self, model: Model, path: str | Path, n_threads: int, use_gpu: bool = False) -> None:
        mtmd.mtmd_log_set(_on_log, ctypes.c_void_p(0))  # libmtmd's log through ours, as llama.cpp's
        mtmd.mtmd_helper_log_set(_on_log, ctypes.c_void_p(0))
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False  # the first image pays for it, not every load
        params.media_marker = MARKER.encode()
        with captured_errors() as errors:
            ptr = mtmd.mtmd_init_from_file(str(path).encode(), model.ptr, params)
        if not ptr:
            raise BackendError(f"cannot load projector {path}: {_detail(errors, 'not a projector for this model')}")
        self.ptr = ptr
        self.path = Path(path)
        self.model = model
        self.vision: bool = bool(mtmd.mtmd_support_vision(ptr))
        self.audio: bool = bool(mtmd.mtmd_support_audio(ptr))
        self.sample_rate: int = mtmd.mtmd_get_audio_sample_rate(ptr) if self.audio else 0
        if not (self.vision or self.audio):
            mtmd.mtmd_free(ptr)
            raise BackendError(f"cannot use projector {path}: it takes neither images nor audio")
        # Qwen-VL, Qwen 3.5 and GLM-OCR place an image's embeddings at 2D (M-RoPE) positions that advance the
        # sequence by fewer positions than the image has tokens (ImageChunk.n_pos): the engine maps tokens to
        # positions for them (StreamEngine._position)
        self.mrope: bool = bool(mtmd.mtmd_decode_use_mrope(ptr))

    def tokenize(self, text: str, images: list[DecodedImage | AudioClip], add_special: bool = True) -> ImagePrompt:
        """``text`` with ``images`` (images and audio clips) at its markers, in order, as tokens and chunks.

        Runs on the HTTP side while the engine thread encodes, as llama-server tokenizes in its HTTP
        threads while its loop encodes: the tokenizer resizes and normalises the pixels into the new
        chunk from the projector's settings; the encoder's buffers are the engine thread's alone.
        Raises ValueError when the markers and the media do not pair up, or a medium cannot be used.
        """
        count = text.count(MARKER)
        if count != len(images):
            raise ValueError(f"the prompt has {count} image markers ({MARKER}) but {len(images)} images")
        bitmaps: list[int] = []
        try:
            for index, medium in enumerate(images):
                bitmaps.append(self._audio_bitmap(medium, index) if isinstance(medium, AudioClip)
                               else self._bitmap(medium))
        except BaseException:
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
            raise
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            data = text.encode("utf-8")
            inp = mtmd.mtmd_input_text()
            inp.text, inp.text_len, inp.add_special, inp.parse_special = data, len(data), add_special, True
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            with captured_errors() as errors:
                rc = mtmd.mtmd_tokenize(self.ptr, chunks, ctypes.byref(inp), array, len(bitmaps))
            if rc != 0:
                raise ValueError(f"libmtmd could not tokenize the prompt with its images: {_detail(errors, f'error {rc}')}")
            return self._flatten(chunks)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, image: DecodedImage) -> int:
        if not self.vision:
            raise ValueError("this model's projector takes audio, not images")
        buf = (ctypes.c_uint8 * len(image.rgb)).from_buffer_copy(image.rgb)
        bitmap = mtmd.mtmd_bitmap_init(image.width, image.height, buf)
        if not bitmap:
            raise ValueError(f"libmtmd refused an image of {image.width}x{image.height}")
        mtmd.mtmd_bitmap_set_id(bitmap, image.digest.encode())
        return bitmap

    def _audio_bitmap(self, clip: AudioClip, index: int) -> int:
        """``clip`` decoded, mixed to mono and resampled to the projector's rate by libmtmd's helper."""
        bitmap = self._decoded(clip, f"images[{index}] ({clip.container.upper()} audio)")
        mtmd.mtmd_bitmap_set_id(bitmap, clip.digest.encode())
        return bitmap

    def audio_samples(self, clip: AudioClip) -> np.ndarray:
        """``clip`` as the projector hears it: mono float32 samples at :attr:`sample_rate`, decoded by the
        helper that decodes a chat's clips (so a recording cut from them is heard as the whole would be)."""
        bitmap = self._decoded(clip, f"the {clip.container.upper()} file")
        try:
            n_bytes = mtmd.mtmd_bitmap_get_n_bytes(bitmap)
            data = ctypes.string_at(mtmd.mtmd_bitmap_get_data(bitmap), n_bytes)
            return np.frombuffer(data, np.float32)
        finally:
            mtmd.mtmd_bitmap_free(bitmap)

    def _decoded(self, clip: AudioClip, what: str) -> int:
        """An audio bitmap of ``clip`` (the caller's to free); ValueError naming ``what`` when it cannot be used."""
        if not self.audio:
            raise ValueError(f"{what}: this model's projector takes images, not audio")
        buf = (ctypes.c_uint8 * len(clip.data)).from_buffer_copy(clip.data)
        with captured_errors() as errors:
            bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ptr, buf, len(clip.data), False)
        if not bitmap:
            raise ValueError(f"{what} could not be decoded (corrupt or truncated?): {_detail(errors, 'no samples')}")
        n_samples = mtmd.mtmd_bitmap_get_n_bytes(bitmap) // ctypes.sizeof(ctypes.c_float)
        try:
            if n_samples < MIN_AUDIO_SAMPLES:
                raise ValueError(f"{what} holds {n_samples} samples at {self.sample_rate} Hz once decoded: "
                                 f"too short (at least {MIN_AUDIO_SAMPLES} are needed)")
            check_length(n_samples / self.sample_rate, what)
        except ValueError:
            mtmd.mtmd_bitmap_free(bitmap)
            raise
        return bitmap

    def _flatten(self, chunks: int) -> ImagePrompt:
        tokens: list[int] = []
        images: dict[int, ImageChunk] = {}
        clip_id, window = b"", 0  # the audio clip the last chunk belonged to, and its window's index
        slices: dict[bytes, int] = {}  # chunks so far of each image: a sliced image (Llama 4's tiles) has several
        try:
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                kind = mtmd.mtmd_input_chunk_get_type(chunk)
                if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t()
                    ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    tokens.extend(ptr[: n.value])
                    continue
                chunk_id = mtmd.mtmd_input_chunk_get_id(chunk) or b""
                if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO:  # a clip's windows share its id: each its own digest
                    window = window + 1 if chunk_id == clip_id else 0
                    clip_id = chunk_id
                    digest = hashlib.sha256(chunk_id + b":%d" % window).hexdigest()
                else:  # an image's first chunk keeps its digest, its further slices each their own
                    clip_id, index = b"", slices.get(chunk_id, 0)
                    slices[chunk_id] = index + 1
                    digest = chunk_id.decode() if index == 0 else hashlib.sha256(chunk_id + b"/%d" % index).hexdigest()
                n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
                run = placeholders(digest, n_tokens)
                if run[0] not in images:
                    images[run[0]] = ImageChunk(mtmd.mtmd_input_chunk_copy(chunk), n_tokens, digest,
                                                mtmd.mtmd_input_chunk_get_n_pos(chunk))
                tokens.extend(run)
        except BaseException:
            ImagePrompt(tokens, images).close()
            raise
        if len(tokens) > 1 and tokens[0] == tokens[1] == self.model.vocab.bos:  # a template's BOS and the tokenizer's
            del tokens[0]
        return ImagePrompt(tokens, images)

    def decode(self, ctx: Context, chunk: ImageChunk, pos: int, seq_id: int) -> None:
        """Encode ``chunk`` and put its embeddings into ``seq_id``'s KV from position ``pos`` on (an M-RoPE
        image: at ``pos`` and its grid's offsets from it, libmtmd lays them out)."""
        new_pos = ll.llama_pos(0)
        rc = mtmd.mtmd_helper_eval_chunk_single(self.ptr, ctx.ptr, chunk.ptr, pos, seq_id, ctx.n_batch, False,
                                                ctypes.byref(new_pos))
        if rc != 0:
            raise BackendError(f"libmtmd could not encode and decode an image or audio clip (error {rc})")

    def close(self) -> None:
        if self.ptr:
            mtmd.mtmd_free(self.ptr)
            self.ptr = None
