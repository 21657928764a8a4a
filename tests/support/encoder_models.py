"""Small deterministic encoder and reranker GGUFs, laid out as llama.cpp's converter writes the real ones.

Random weights, real tokenizers: a WordPiece vocabulary written here for BERT and nomic-BERT
(``all-minilm``, ``mxbai-embed-large``, ``nomic-embed-text``), a SentencePiece unigram vocabulary
for XLM-RoBERTa (``bge-m3``: architecture ``bert``, tokenizer model ``t5``), and SmolLM2's BPE
vocabulary for a Qwen3-Reranker-style model (``cls.output`` over the "yes"/"no" rows, a ``rerank``
prompt template). Rerankers carry pooling type ``rank``: BERT cross-encoders a classification head
(``cls``, ``cls.output``) over the CLS token, Qwen3 a two-label head over the last token.

Each file is built once into the test cache (outside the repository), under a name that carries
:data:`BUILD`: change a builder, bump it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter, Keys, PoolingType

from .fixtures import cache_dir

BUILD = 2  # part of every cached file's name

# Words the tests write texts with: WordPiece and unigram vocabularies hold each one whole.
WORDS = (
    "the a an of to in on at for with and or is are was were be it this that what which who how why when where "
    "cat cats dog dogs bird fish horse cow animal animals pet pets sat sits sleeps runs eat eats food mat rug "
    "house home garden tree trees flower flowers sun moon sky rain snow weather cold hot warm day night "
    "paris france london england city capital country river mountain sea ocean island europe "
    "stock stocks market markets fell rose price prices bank money trade economy "
    "python code program computer software bug test tests data model models language learning "
    "music song play plays game games ball team win won football sport "
    "red green blue yellow black white color colour big small fast slow new old good bad "
    "i you he she we they my your his her our their me him us them not no yes do does did "
    "can will would should could have has had make makes made go goes went see saw know knows "
    "question answer document query search find rank relevant passage text word words"
).split()
SUFFIXES = ("s", "es", "ed", "ing", "ly", "er", "est")
LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"
PUNCTUATION = ".,?!;:'\"-()"

BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0-4
PAD, UNK, CLS, SEP, MASK = range(5)


def wordpiece_tokens() -> list[str]:
    """A WordPiece vocabulary as llama.cpp stores it: word starts spelled with ``▁`` ("phantom space"),
    continuations bare (the converter's rewrite of BERT's ``##`` pieces); every ASCII word spells."""
    words = [f"\u2581{w}" for w in WORDS] + [f"\u2581{c}" for c in LETTERS + PUNCTUATION]
    pieces = list(SUFFIXES) + list(LETTERS)
    return list(BERT_SPECIALS) + list(dict.fromkeys(words + pieces))  # each once: "a" is a word and a letter


def unigram_pieces() -> list[tuple[str, float]]:
    """A SentencePiece unigram vocabulary (pieces and scores): whole words score above their letters."""
    words = [(f"\u2581{w}", -5.0 - 0.01 * i) for i, w in enumerate(WORDS)]
    alphabet = LETTERS + LETTERS.upper() + PUNCTUATION  # cased, as XLM-R's vocabulary is
    chars = [(f"\u2581{c}", -12.0) for c in alphabet] + [(c, -14.0) for c in alphabet]
    return list(dict(reversed([*words, ("\u2581", -10.0), *chars])).items())[::-1]  # each once, first score kept


# --- builders -----------------------------------------------------------------------------------

def bert(path: Path, pooling: PoolingType = PoolingType.MEAN, reranker: bool = False, n_embd: int = 64,
         n_layer: int = 2, context_length: int = 512, n_ff: int | None = None) -> Path:
    """A BERT encoder (``all-minilm``-like) with the WordPiece vocabulary above; ``reranker`` makes it
    a cross-encoder (pooling ``rank``: ``cls`` dense + tanh, then a one-label ``cls.output``).
    ``n_ff``: the feed-forward width, twice ``n_embd`` unless given (real BERTs: four times)."""
    n_ff = n_ff or 2 * n_embd
    w = _encoder_writer(path, "bert", n_embd, n_layer, context_length, PoolingType.RANK if reranker else pooling,
                        n_ff)
    _wordpiece(w)
    t = _tensors(w, 1, n_embd)
    t("position_embd.weight", n_embd, context_length, scale=0.1)
    _bert_body(t, n_embd, n_layer, fused_qkv=False, gated=False, ff=n_ff)
    if reranker:
        _classifier(w, t, n_embd)
    return _finish(w, path)


def nomic_bert(path: Path, n_embd: int = 64, n_layer: int = 2, context_length: int = 2048) -> Path:
    """A nomic-BERT encoder (``nomic-embed-text``): RoPE instead of position embeddings, fused
    ``attn_qkv``, a SwiGLU feed-forward without biases, mean pooling."""
    w = _encoder_writer(path, "nomic-bert", n_embd, n_layer, context_length, PoolingType.MEAN)
    w.add_rope_freq_base(1000.0)
    _wordpiece(w)
    t = _tensors(w, 2, n_embd)
    _bert_body(t, n_embd, n_layer, fused_qkv=True, gated=True)
    return _finish(w, path)


def xlm_roberta(path: Path, reranker: bool = False, n_embd: int = 64, n_layer: int = 2,
                context_length: int = 512) -> Path:
    """An XLM-RoBERTa encoder as ``bge-m3`` ships (architecture ``bert``, a SentencePiece unigram
    vocabulary as tokenizer model ``t5``, CLS pooling); ``reranker`` makes it a ``bge-reranker``-style
    cross-encoder (pooling ``rank``)."""
    w = _encoder_writer(path, "bert", n_embd, n_layer, context_length,
                        PoolingType.RANK if reranker else PoolingType.CLS)
    pieces = unigram_pieces()
    w.add_tokenizer_model("t5")
    w.add_tokenizer_pre("default")
    w.add_token_list(["<s>", "<pad>", "</s>", "<unk>", *(p for p, _ in pieces)])
    w.add_token_scores([0.0] * 4 + [s for _, s in pieces])
    w.add_token_types([3, 3, 3, 2] + [1] * len(pieces))  # control x3, unknown, normal...
    w.add_add_space_prefix(True)
    w.add_remove_extra_whitespaces(True)
    w.add_token_type_count(1)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_unk_token_id(3)
    w.add_pad_token_id(1)
    w.add_sep_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(True)  # RobertaProcessing: <s> A </s></s> B </s>
    t = _tensors(w, 3, n_embd, n_vocab=4 + len(pieces), token_types=1)
    t("position_embd.weight", n_embd, context_length, scale=0.1)
    _bert_body(t, n_embd, n_layer, fused_qkv=False, gated=False)
    if reranker:
        _classifier(w, t, n_embd)
    return _finish(w, path)


RERANK_TEMPLATE = (  # llama.cpp's converter writes this one into every Qwen3-Reranker GGUF
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)


def qwen3_reranker(path: Path, vocab_source: Path, n_embd: int = 64, n_layer: int = 2) -> Path:
    """A Qwen3-Reranker-style model: a small ``qwen3`` decoder with ``vocab_source``'s BPE vocabulary
    (SmolLM2's), pooling ``rank`` over the last token, ``cls.output`` holding the "yes" and "no" rows
    of the (tied) output head, labels ``["yes", "no"]`` and the ``rerank`` prompt template."""
    source = GGUFReader(vocab_source)
    tokens = [bytes(source.fields[Keys.Tokenizer.LIST].parts[i]).decode("utf-8")
              for i in source.fields[Keys.Tokenizer.LIST].data]
    n_vocab, heads, head_dim, ff = len(tokens), 4, 16, 2 * n_embd
    w = GGUFWriter(str(path), "qwen3")
    w.add_block_count(n_layer)
    w.add_context_length(1024)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(2)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_file_type(0)
    w.add_pooling_type(PoolingType.RANK)
    w.add_classifier_output_labels(["yes", "no"])
    w.add_chat_template([{"name": "rerank", "template": RERANK_TEMPLATE}])
    for field in source.fields.values():  # the tokenizer as SmolLM2 ships it: tokens, merges, specials
        if field.name.startswith("tokenizer.") and not field.name.startswith("tokenizer.chat_template"):
            sub = field.types[-1] if len(field.types) > 1 else None
            w.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    # small token embeddings: the tied head's "yes"/"no" logits stay close, so scores spread over (0, 1)
    t = _tensors(w, 4, n_embd, n_vocab=n_vocab, token_types=0, encoder=False, scale=0.05)
    t("output_norm.weight", n_embd, norm=True)
    for il in range(n_layer):
        blk = f"blk.{il}."
        t(f"{blk}attn_norm.weight", n_embd, norm=True)
        t(f"{blk}attn_q.weight", n_embd, heads * head_dim)
        t(f"{blk}attn_k.weight", n_embd, 2 * head_dim)
        t(f"{blk}attn_v.weight", n_embd, 2 * head_dim)
        t(f"{blk}attn_q_norm.weight", head_dim, norm=True)
        t(f"{blk}attn_k_norm.weight", head_dim, norm=True)
        t(f"{blk}attn_output.weight", heads * head_dim, n_embd)
        t(f"{blk}ffn_norm.weight", n_embd, norm=True)
        t(f"{blk}ffn_gate.weight", n_embd, ff)
        t(f"{blk}ffn_up.weight", n_embd, ff)
        t(f"{blk}ffn_down.weight", ff, n_embd)
    embeddings = t.last["token_embd.weight"]  # numpy (n_vocab, n_embd): the tied output head's rows
    yes, no = tokens.index("yes"), tokens.index("no")
    w.add_tensor("cls.output.weight", np.stack([embeddings[yes], embeddings[no]]))
    return _finish(w, path)


def cached(name: str, build: Callable[[Path], Path]) -> Path:
    """``build``'s file in the test cache under ``name`` (and :data:`BUILD`), written once, atomically."""
    folder = cache_dir() / "encoders"
    folder.mkdir(exist_ok=True)
    target = folder / f"{name}-b{BUILD}.gguf"
    if not target.exists():
        partial = target.with_suffix(".partial")
        build(partial)
        partial.replace(target)
    return target


# --- parts --------------------------------------------------------------------------------------

def _encoder_writer(path: Path, arch: str, n_embd: int, n_layer: int, context_length: int,
                    pooling: PoolingType, n_ff: int | None = None) -> GGUFWriter:
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff or 2 * n_embd)
    w.add_head_count(4)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(pooling)
    w.add_file_type(0)
    return w


def _wordpiece(w: GGUFWriter) -> None:
    """The WordPiece vocabulary with BERT's special tokens, flagged as the converter flags a BERT
    tokenizer.json ([CLS] A [SEP] / [CLS] A [SEP] B [SEP])."""
    tokens = wordpiece_tokens()
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types([3, 2, 3, 3, 3] + [1] * (len(tokens) - len(BERT_SPECIALS)))
    w.add_token_type_count(2)
    w.add_bos_token_id(CLS)
    w.add_eos_token_id(SEP)
    w.add_unk_token_id(UNK)
    w.add_sep_token_id(SEP)
    w.add_pad_token_id(PAD)
    w.add_mask_token_id(MASK)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(True)


class _Tensors:
    """Adds random tensors given in ggml's dimension order; remembers the last arrays by name."""

    def __init__(self, w: GGUFWriter, seed: int) -> None:
        self.w = w
        self.rng = np.random.default_rng(seed)
        self.last: dict[str, np.ndarray] = {}

    def __call__(self, name: str, *shape: int, scale: float | None = None, norm: bool = False) -> None:
        if norm:  # layer-norm weights near one
            data = 1.0 + 0.1 * self.rng.standard_normal(shape[::-1])
        else:  # matrices scaled by their fan-in, so activations stay of order one through the layers
            data = self.rng.standard_normal(shape[::-1]) * (scale if scale is not None else shape[0] ** -0.5)
        array = data.astype(np.float32)
        self.last[name] = array
        self.w.add_tensor(name, array)


def _tensors(w: GGUFWriter, seed: int, e: int, n_vocab: int | None = None, token_types: int = 2,
             encoder: bool = True, scale: float = 1.0) -> _Tensors:
    """The input embeddings (token, token type, their norm for encoders) and a writer of the rest."""
    t = _Tensors(w, seed)
    t("token_embd.weight", e, n_vocab or len(wordpiece_tokens()), scale=scale)
    if token_types:
        t("token_types.weight", e, token_types, scale=0.1)
    if encoder:  # encoders normalise the embeddings first
        t("token_embd_norm.weight", e, norm=True)
        t("token_embd_norm.bias", e, scale=0.02)
    return t


def _bert_body(t: _Tensors, e: int, n_layer: int, fused_qkv: bool, gated: bool, ff: int | None = None) -> None:
    """Post-norm encoder layers: attention (+ biases unless nomic), norm, feed-forward, norm."""
    ff = ff or 2 * e
    for il in range(n_layer):
        blk = f"blk.{il}."
        if fused_qkv:
            t(f"{blk}attn_qkv.weight", e, 3 * e)
        else:
            for name in ("attn_q", "attn_k", "attn_v"):
                t(f"{blk}{name}.weight", e, e)
                t(f"{blk}{name}.bias", e, scale=0.02)
        t(f"{blk}attn_output.weight", e, e)
        t(f"{blk}attn_output_norm.weight", e, norm=True)
        t(f"{blk}attn_output_norm.bias", e, scale=0.02)
        t(f"{blk}ffn_up.weight", e, ff)
        if gated:
            t(f"{blk}ffn_gate.weight", e, ff)
        else:
            t(f"{blk}attn_output.bias", e, scale=0.02)
            t(f"{blk}ffn_up.bias", ff, scale=0.02)
            t(f"{blk}ffn_down.bias", e, scale=0.02)
        t(f"{blk}ffn_down.weight", ff, e)
        t(f"{blk}layer_output_norm.weight", e, norm=True)
        t(f"{blk}layer_output_norm.bias", e, scale=0.02)


def _classifier(w: GGUFWriter, t: _Tensors, e: int) -> None:
    """A sequence-classification head of one label (as ``bge-reranker`` and ms-marco cross-encoders)."""
    w.add_classifier_output_labels(["LABEL_0"])
    t("cls.weight", e, e)
    t("cls.bias", e, scale=0.02)
    t("cls.output.weight", e, 1, scale=1.0)
    t("cls.output.bias", 1, scale=0.1)


def _finish(w: GGUFWriter, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
