"""llama.cpp GGUF files to Rope arguments.

``rope_arguments_from_gguf(path)`` reads the metadata llama.cpp keeps about a
model's rotary embedding and returns ``head_dim``, ``rotary_dim``, ``base``,
``scaling`` and ``layout``, ready for ``Rope(**args)``; ``Rope.from_gguf`` is
the one-call form.  The file is read by ``pyrope._readers.gguf_file``, a reader of the
GGUF v2/v3 layout that checks every count and length in the file against the
bytes left in it before reading on (a hostile file costs work and memory
bounded by its real size; ``gguf.GGUFReader`` trusts the counts), with the
format's constants (ggml type names and block sizes) from the ``gguf`` package,
an optional extra: ``pip install gguf``
(or, in a pyrope checkout, ``pip install '.[gguf]'``).  Importing this module
does not import it.

What is read (``{arch}`` = ``general.architecture``), with llama.cpp's defaults
(``llama_model::load_hparams`` in ``src/llama-model.cpp``):

* ``{arch}.attention.key_length`` (else ``embedding_length / attention.head_count``)
  is ``head_dim``; ``{arch}.rope.dimension_count`` (else ``head_dim``) is
  ``rotary_dim``; ``{arch}.rope.freq_base`` (else 10000) is ``base``.
* ``{arch}.rope.scaling.type`` (``none``, ``linear``, ``yarn``, ``longrope``;
  llama.cpp reads a missing one as ``linear``) with ``.factor``,
  ``.original_context_length`` (else ``{arch}.context_length``),
  ``.yarn_beta_fast``/``.yarn_beta_slow`` (32, 1), ``.yarn_attn_factor``
  (transformers' ``attention_factor``, which the converter copies there),
  ``.yarn_log_multiplier`` (``mscale_all_dim``), ``.attn_factor`` (a
  multiplier on cos and sin for every rule, as llama.cpp applies it);
* the tensors ``rope_freqs.weight`` (per-pair divisors: Llama 3.1's rule as the
  converter bakes it, -> ``FreqFactors``), ``rope_factors_long.weight`` /
  ``rope_factors_short.weight`` (-> ``LongRope``);
* ``{arch}.rope.dimension_sections`` (multimodal RoPE), see below.

Each file gives the ``Resolved`` its transformers config gives through
:mod:`pyrope.scaling`: ``linear`` -> ``Linear``, ``yarn`` -> ``Yarn``,
``longrope`` -> ``LongRope``, ``rope_freqs`` -> ``FreqFactors``.  GGUF stores
these numbers as float32; a value that float32 does not hold exactly (a factor
list like 1.05, 1.1, ...) arrives rounded, as llama.cpp computes with it.

Layout: the pairing of the q/k tensors *as stored in the file*, from the
architecture (``ROPE_TYPES`` below).  llama.cpp's converter permutes the q/k
weights of Llama-family checkpoints so that its "normal" RoPE rotates adjacent
pairs: a GGUF ``llama`` is ``interleaved`` although its transformers checkpoint
is ``split_half``.  Pass ``layout=`` to ``Rope.from_gguf`` for an architecture
the table does not know.

A key this module does not know under ``{arch}.rope.``, a missing or malformed
key, or a combination it would have to guess about raises ``ValueError`` naming
the key; nothing is ignored.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import numbers
import os

from ._engine.checks import MAX_HEAD_DIM
from ._readers.gguf_file import GGUFFile
from .errors import ImportError, RopeError, TypeError, ValueError, install_hint, shown
from .scaling import FreqFactors, Linear, LongRope, Resolved, Yarn, _positive_int, resolve

__all__ = ["rope_arguments_from_gguf", "rope_from_gguf", "ROPE_TYPES", "LAYOUTS", "EXTRA"]

EXTRA = "gguf"

# --------------------------------------------------------------------------- architecture -> layout

# llama.cpp's rope type per GGUF architecture: the switch of llama_model_rope_type()
# in src/llama-model.cpp (ggml-org/llama.cpp master, 2025-26); the architecture
# strings are LLM_ARCH_NAMES in src/llama-arch.cpp (gguf-py's MODEL_ARCH_NAMES).
#   NORM   "pairs of consecutive head values": (2i, 2i+1) of the stored tensor
#   NEOX   "pairs of head values offset by n_rot/2": (i, i + n_rot/2)
#   MROPE  NEOX pairing, pair i turning by the t/h/w position its section names
#   IMROPE MROPE with the sections interleaved over the pairs (Qwen3-VL)
#   NONE   no rotary embedding (learned or ALiBi positions, recurrent models)
# Architectures llama.cpp added after gguf 0.19's MODEL_ARCH_NAMES are left out (their
# strings unchecked): Rope.from_gguf(..., layout=) reads them.
_NORM = (
    "llama", "llada", "llama4", "deci", "baichuan", "starcoder", "internlm2", "minicpm", "xverse",
    "command-r", "cohere2", "olmo", "arctic", "deepseek", "deepseek2", "deepseek2-ocr", "plm", "chatglm",
    "granite", "granitemoe", "granitehybrid", "chameleon", "bailingmoe", "neo-bert", "smollm3", "arcee",
    "ernie4_5", "ernie4_5-moe", "mistral3", "mistral4", "llama-embed", "maincoder", "glm-dsa",
)
_NEOX = (
    "falcon", "falcon-h1", "grok", "dbrx", "bert", "jina-bert-v3", "modern-bert", "nomic-bert",
    "nomic-bert-moe", "eurobert", "stablelm", "bitnet", "qwen", "qwen2", "dream", "qwen2moe", "qwen3",
    "qwen3moe", "llada-moe", "rnd1", "olmo2", "olmoe", "phi2", "phi3", "phimoe", "plamo", "plamo2", "plamo3",
    "gemma", "gemma2", "gemma3", "gemma3n", "gemma4", "gemma-embedding", "starcoder2", "openelm", "gptneox",
    "codeshell", "orion", "nemotron", "exaone", "exaone4", "exaone-moe", "minicpm3", "bailingmoe2", "dots1",
    "hunyuan-moe", "jais2", "gpt-oss", "hunyuan-dense", "lfm2", "lfm2moe", "smallthinker", "seed_oss",
    "grovemoe", "apertus", "minimax-m2", "cogvlm", "pangu-embedded", "afmoe", "qwen3next", "mimo2", "step35",
)
_MROPE = ("qwen2vl", "paddleocr")
_IMROPE = ("qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe")
# MROPE when the file has sections, else the rope type given here (llama.cpp: hparams.use_mrope())
_MROPE_IF_SECTIONS = {"glm4": "norm", "glm4moe": "neox", "hunyuan_vl": "neox"}
_NONE = (
    "clip", "gpt2", "gptj", "mpt", "refact", "bloom", "mamba", "mamba2", "jamba", "jina-bert-v2", "t5",
    "t5encoder", "jais", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "wavtokenizer-dec", "nemotron_h",
    "nemotron_h_moe", "kimi-linear",
)

ROPE_TYPES = {
    **{a: "norm" for a in _NORM}, **{a: "neox" for a in _NEOX}, **{a: "mrope" for a in _MROPE},
    **{a: "imrope" for a in _IMROPE}, **{a: "none" for a in _NONE},
    **{a: f"mrope|{plain}" for a, plain in _MROPE_IF_SECTIONS.items()},
}

# pyrope's name for the pairing of each llama.cpp rope type (ggml_rope_multi pairs like NEOX)
LAYOUTS = {"norm": "interleaved", "neox": "split_half", "mrope": "split_half", "imrope": "split_half"}

# --------------------------------------------------------------------------- keys

_ROPE_KEYS = {
    "rope.dimension_count", "rope.dimension_count_swa", "rope.dimension_sections", "rope.freq_base",
    "rope.freq_base_swa", "rope.scale_linear", "rope.scaling.type", "rope.scaling.factor",
    "rope.scaling.alpha", "rope.scaling.attn_factor", "rope.scaling.original_context_length",
    "rope.scaling.finetuned", "rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_ext_factor",
    "rope.scaling.yarn_attn_factor", "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
}
_YARN_KEYS = ("rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor",
              "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow")
_SCALING_TYPES = ("none", "linear", "yarn", "longrope")
_FREQS, _LONG, _SHORT = "rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"


def _import_gguf():
    try:
        import gguf
    except builtins.ImportError as exc:
        raise ImportError(f"reading GGUF files needs the gguf package: {install_hint('gguf', EXTRA)}") from exc
    return gguf


# --------------------------------------------------------------------------- reading


class _Meta:
    """The file's key/value metadata and tensors, with checked accessors naming the key.

    Read with the bounded reader of ``_gguf_file`` (every count checked against the
    file's size first); values are decoded on first use and kept. ``close()`` (or
    ``with``) releases the file."""

    def __init__(self, gguf, path):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"gguf: path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        if not isinstance(self.path, str):
            raise TypeError(f"gguf: path must be a str or os.PathLike of str, got {self.path!r:.80}")
        if not os.path.isfile(self.path):
            raise ValueError(f"gguf: no such file {self.path!r}")
        self.file = GGUFFile(self.path, gguf)
        self.values = _Values(self.file)
        self.is_array = {key: self.file.is_array(key) for key in self.file.fields}
        self.tensors = self.file.tensors

    def close(self):
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _bad(self, key, what, value):
        return ValueError(f"gguf: {key!r} must be {what}, got {shown(value)} (in {self.path!r})")

    def int(self, key, default=None, *, minimum=1):
        value = self.values.get(key)
        if value is None:
            return default
        if self.is_array[key] or isinstance(value, bool) or not isinstance(value, numbers.Integral) \
                or value < minimum:
            raise self._bad(key, f"an integer >= {minimum}", value)
        return int(value)

    def float(self, key, default=None):
        value = self.values.get(key)
        if value is None:
            return default
        if self.is_array[key] or isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value):
            raise self._bad(key, "a finite number", value)
        return float(value)

    def positive(self, key, default=None):
        value = self.float(key, default)
        if value is not None and value <= 0:
            raise self._bad(key, "a number > 0", value)
        return value

    def str(self, key, default=None):
        value = self.values.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._bad(key, "a string", value)
        return value

    def ints(self, key):
        """An integer array, or None."""
        value = self.values.get(key)
        if value is None:
            return None
        if not self.is_array[key] or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                             for v in value):
            raise self._bad(key, "an array of integers", value)
        return [int(v) for v in value]

    def vector(self, name, n_pairs):
        """A 1-D float tensor of ``n_pairs`` entries as float64, or None when absent."""
        tensor = self.tensors.get(name)
        if tensor is None:
            return None
        if tensor.type_name not in ("F32", "F16", "F64"):
            raise ValueError(f"gguf: tensor {name!r} must be F32, F16 or F64, got {tensor.type_name} "
                             f"(in {self.path!r})")
        if tensor.n_elements != n_pairs:   # the count first: nothing of a wrong size is read
            raise ValueError(f"gguf: tensor {name!r} must have rotary_dim/2 = {n_pairs} entries (one per "
                             f"rotation pair), got {tensor.n_elements} (in {self.path!r})")
        return tuple(float(v) for v in self.file.floats(name))


class _Values:
    """``key -> value`` of a :class:`GGUFFile`, decoded on first ``get`` (a tokenizer's
    arrays, never asked for, are never decoded)."""

    def __init__(self, file):
        self._file, self._done = file, {}

    def __iter__(self):
        return iter(self._file.fields)

    def __contains__(self, key):
        return key in self._file.fields

    def get(self, key, default=None):
        if key not in self._file.fields:
            return default
        if key not in self._done:
            self._done[key] = self._file.value(key)
        return self._done[key]


# --------------------------------------------------------------------------- the reader


def rope_arguments_from_gguf(path, *, layer=None, seq_len=None, layout=None) -> dict:
    """Keyword arguments ``head_dim``, ``rotary_dim``, ``base``, ``scaling`` and
    ``layout`` for ``Rope``, read from the GGUF file at ``path``.

    ``layer``: ``None`` for the full-attention layers (every layer of most
    models), or a layer index ``0 <= layer < {arch}.block_count``: a per-layer
    ``attention.head_count`` array then gives that layer's head count, and a
    per-layer boolean ``attention.sliding_window_pattern`` marking the layer as
    sliding-window selects ``rope.freq_base_swa``, ``rope.dimension_count_swa``
    and ``attention.key_length_swa`` (each defaulting to the full-attention
    value; the scaling rule is shared, llama.cpp's default).  Where llama.cpp
    decides sliding layers in code rather than in the file (an integer period,
    or no pattern key) and the file gives the sliding layers other values,
    ``layer=`` raises ``ValueError``: the file does not say which layers slide.
    ``seq_len``: current length; selects LongRoPE's long factors when it
    exceeds the original context (llama.cpp decides by its context size per
    sequence; ``None``: short, as transformers starts).
    ``layout``: ``None`` for the pairing llama.cpp uses for the architecture
    (``ROPE_TYPES``, ``LAYOUTS``); a layout name overrides it, and lets an
    architecture the table does not know be read.

    Raises ``ImportError`` (a ``pyrope.RopeError``) naming the ``gguf`` extra
    when the package is missing, ``ValueError`` naming the key for a missing or
    malformed one (also sections that do not fit the rotary dims).
    """
    gguf = _import_gguf()
    with _Meta(gguf, path) as meta:
        try:
            return _arguments(meta, layer, seq_len, layout)
        except RopeError as exc:
            raise _in_file(exc, meta.path) from None


def rope_from_gguf(cls, path, **kw):
    """``Rope.from_gguf``: ``cls`` built from the file's arguments, any refusal naming the file."""
    args = rope_arguments_from_gguf(path, **kw)
    try:
        return cls(**args)
    except RopeError as exc:   # e.g. sections that do not fit the rotary pairs
        raise _in_file(exc, os.fspath(path)) from None


def _in_file(exc, path):
    """``exc`` (a RopeError), its message naming ``path`` when it does not yet."""
    if repr(path) in str(exc):
        return exc
    return type(exc)(f"{exc} (in {path!r})")


def _arguments(meta, layer, seq_len, layout):
    """``rope_arguments_from_gguf`` on an open file."""
    arch = meta.str("general.architecture")
    if arch is None:
        raise ValueError(f"gguf: missing key 'general.architecture' (in {meta.path!r})")
    p = f"{arch}."

    unknown = sorted(k for k in meta.values if k.startswith(p + "rope.") and k[len(p):] not in _ROPE_KEYS)
    if unknown:
        raise ValueError(f"gguf: unknown rope key(s) {unknown}: pyrope does not know what they do to the "
                         f"frequencies (in {meta.path!r})")

    # ---- which rope llama.cpp runs for this architecture
    sections = meta.ints(p + "rope.dimension_sections")
    kind = ROPE_TYPES.get(arch)
    if kind is None:
        if layout is None:
            raise ValueError(f"gguf: 'general.architecture' = {shown(arch)} is not in pyrope's table of llama.cpp "
                             "architectures (pyrope.gguf.ROPE_TYPES); pass layout= to say how its q/k pairs")
        kind = "mrope" if sections is not None else "given"
    if kind.startswith("mrope|"):
        kind = "mrope" if sections is not None and any(sections[:2]) else kind.split("|")[1]
    if kind == "none":
        raise ValueError(f"gguf: 'general.architecture' = {shown(arch)} uses no rotary embedding in llama.cpp")

    # ---- the layer
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, numbers.Integral):
            raise TypeError(f"gguf: layer must be an int or None, got {shown(layer)}")
        n_layers = meta.int(p + "block_count")
        if n_layers is None:
            raise ValueError(f"gguf: layer={layer} needs the key {p + 'block_count'!r} (in {meta.path!r})")
        if not 0 <= layer < n_layers:
            raise ValueError(f"gguf: layer must be in [0, {n_layers}) ({p}block_count), got {layer}")
        layer = int(layer)
    sliding = _is_sliding(meta, p, layer)

    # ---- head_dim, rotary_dim, base
    head_dim = meta.int(p + "attention.key_length")
    if head_dim is None:
        head_dim = _head_dim_from_heads(meta, p, layer)
    n_rot = meta.int(p + "rope.dimension_count", head_dim)
    base = meta.float(p + "rope.freq_base", 10000.0)
    if sliding:
        head_dim = meta.int(p + "attention.key_length_swa", head_dim)
        n_rot = meta.int(p + "rope.dimension_count_swa", n_rot)
        base = meta.float(p + "rope.freq_base_swa", base)
    if meta.values.get(p + "attention.kv_lora_rank") is not None:
        # multi-head latent attention (DeepSeek-V2 family): llama.cpp ropes q_pe/k_pe, a
        # separate n_rot-wide part of each head, so the rope's head is that part
        head_dim = n_rot
    if head_dim > MAX_HEAD_DIM:   # a count from the file, checked before anything is sized by it
        raise ValueError(f"gguf: the head size {head_dim} ({p + 'attention.key_length'!r}, or "
                         f"{p + 'embedding_length'!r} / {p + 'attention.head_count'!r}) must be at most "
                         f"{MAX_HEAD_DIM} (in {meta.path!r})")
    if n_rot % 2 or n_rot > head_dim:
        raise ValueError(f"gguf: {p + 'rope.dimension_count'!r} = {n_rot} must be even and at most the head "
                         f"size {head_dim} (in {meta.path!r})")
    if base <= 1:
        raise ValueError(f"gguf: {p + 'rope.freq_base'!r} must be > 1, got {base!r} (in {meta.path!r})")
    if seq_len is not None:
        seq_len = _positive_int("seq_len", seq_len, "gguf")

    scaling = _scaling(meta, p, head_dim, n_rot, base, seq_len)
    args = {"head_dim": head_dim, "rotary_dim": n_rot, "base": base, "scaling": scaling,
            "layout": LAYOUTS[kind] if layout is None else layout}

    if kind in ("mrope", "imrope"):
        key = p + "rope.dimension_sections"
        if sections is None:
            raise ValueError(f"gguf: missing key {key!r}: llama.cpp's {kind.upper()} rope of {arch!r} needs "
                             f"the pairs each position component turns (in {meta.path!r})")
        mrope_section = list(sections)
        while mrope_section and mrope_section[-1] == 0:  # the converter pads to 4 entries
            mrope_section.pop()
        # IMROPE assigns the pairs round-robin, as Qwen3-VL (ggml's rope_multi, mode IMROPE)
        args.update(mrope_section=mrope_section, mrope_interleaved=kind == "imrope")
    # NORM/NEOX architectures: llama.cpp does not read the sections, neither does pyrope
    return args


def _head_dim_from_heads(meta, p, layer):
    """``embedding_length / head_count`` (llama.cpp's default head size), per layer when the count is."""
    key = p + "attention.head_count"
    n_embd = meta.int(p + "embedding_length")
    heads = meta.values.get(key)
    if n_embd is None or heads is None:
        missing = [k for k, v in ((p + "embedding_length", n_embd), (key, heads)) if v is None]
        raise ValueError(f"gguf: needs {p + 'attention.key_length'!r}, or {p + 'embedding_length'!r} and "
                         f"{key!r}; missing {missing} (in {meta.path!r})")
    if meta.is_array[key]:
        counts = meta.ints(key)
        if layer is None:
            attention = sorted({c for c in counts if c > 0})
            if len(attention) != 1:
                raise ValueError(f"gguf: {key!r} differs by layer {shown(counts)}: pass layer=")
            heads = attention[0]
        else:
            if layer >= len(counts):
                raise ValueError(f"gguf: {key!r} has {len(counts)} entries, no layer {layer}")
            heads = counts[layer]
            if heads == 0:
                raise ValueError(f"gguf: layer {layer} has no attention heads ({key!r}[{layer}] = 0)")
    else:
        heads = meta.int(key)
    return n_embd // heads


def _is_sliding(meta, p, layer):
    """Whether ``layer`` is a sliding-window layer whose rope the file states apart."""
    if layer is None:
        return False
    swa_keys = [p + k for k in ("rope.freq_base_swa", "rope.dimension_count_swa", "attention.key_length_swa")]
    differs = any(meta.values.get(k) is not None and meta.values.get(k) != meta.values.get(k.replace("_swa", ""))
                  for k in swa_keys)
    key = p + "attention.sliding_window_pattern"
    pattern = meta.values.get(key)
    if pattern is not None and meta.is_array[key]:
        if layer >= len(pattern) or not all(isinstance(v, bool) for v in pattern):
            raise ValueError(f"gguf: {key!r} must be one bool per layer, got {shown(pattern)}")
        return bool(pattern[layer])
    if differs:
        raise ValueError(f"gguf: the file gives sliding-window layers their own rope ({', '.join(swa_keys)}) but "
                         f"{key!r} is not a per-layer list, so it does not say whether layer {layer} slides "
                         "(llama.cpp decides that per architecture in code)")
    return False


def _scaling(meta, p, head_dim, n_rot, base, seq_len):
    """The frequency rule: None, a rule object, or a Resolved (a rule with llama.cpp's attention multiplier)."""
    key_type = p + "rope.scaling.type"
    kind = meta.str(key_type, "linear")  # llama.cpp's default when the key is absent
    if kind not in _SCALING_TYPES:
        raise ValueError(f"gguf: {key_type!r} must be one of {', '.join(_SCALING_TYPES)}, got {shown(kind)}")
    factor = meta.positive(p + "rope.scaling.factor")
    if factor is None:
        factor = meta.positive(p + "rope.scale_linear")  # llama.cpp's older name
    if kind == "none":
        factor = None  # llama.cpp: "never scale if scaling type is none"
    attn = meta.positive(p + "rope.scaling.attn_factor", 1.0)
    if meta.float(p + "rope.scaling.alpha", 0.0) != 0.0:
        raise ValueError(f"gguf: {p + 'rope.scaling.alpha'!r} (an NTK-alpha base change some architectures "
                         "apply in llama.cpp code) is not read by pyrope")
    if kind != "yarn":
        present = [p + k for k in _YARN_KEYS if meta.values.get(p + k) is not None]
        if present:
            raise ValueError(f"gguf: {present} apply to {key_type!r} = 'yarn' only, the file says {kind!r}")

    context = meta.int(p + "context_length")
    original = meta.int(p + "rope.scaling.original_context_length", context)  # llama.cpp: n_ctx_orig_yarn
    n_pairs = n_rot // 2
    freqs = meta.vector(_FREQS, n_pairs)
    long, short = meta.vector(_LONG, n_pairs), meta.vector(_SHORT, n_pairs)
    where = f"(in {meta.path!r})"

    if (long is None) != (short is None):
        present, absent = (_LONG, _SHORT) if long is not None else (_SHORT, _LONG)
        raise ValueError(f"gguf: tensor {present!r} without {absent!r} {where}")
    if freqs is not None and long is not None:
        raise ValueError(f"gguf: both {_FREQS!r} and {_LONG!r}/{_SHORT!r}: which divisors apply is ambiguous {where}")
    plain = factor is None or factor == 1.0

    if kind == "longrope" or long is not None:
        if long is None:
            raise ValueError(f"gguf: {key_type!r} = 'longrope' needs the tensors {_LONG!r} and {_SHORT!r} {where}")
        if kind == "yarn" or (kind == "linear" and not plain):
            raise ValueError(f"gguf: LongRoPE factor tensors with {key_type!r} = {kind!r} and a scaling factor "
                             f"{factor!r}: pyrope does not combine them {where}")
        if original is None:
            raise ValueError(f"gguf: LongRoPE needs {p + 'rope.scaling.original_context_length'!r} or "
                             f"{p + 'context_length'!r} {where}")
        # llama.cpp multiplies cos/sin by rope.scaling.attn_factor alone (1 when absent): the
        # converter stores transformers' sqrt(1 + ln(s) / ln(L0)) there
        return LongRope(short_factor=short, long_factor=long, original_max_position_embeddings=original,
                        max_position_embeddings=context, attention_factor=attn, seq_len=seq_len)

    if freqs is not None:
        if kind == "yarn" or not plain:
            raise ValueError(f"gguf: {_FREQS!r} with {key_type!r} = {kind!r} and factor {factor!r}: pyrope does "
                             f"not combine per-pair divisors with another rule {where}")
        return FreqFactors(factors=freqs, attention_factor=attn)

    if kind == "yarn":
        rule = _yarn(meta, p, factor, original, context, where)
        if attn != 1.0:
            effective = resolve(rule, head_dim=head_dim, rotary_dim=n_rot, base=base).attention_factor
            rule = dataclasses.replace(rule, attention_factor=effective * attn)
        return rule

    rule = None if plain else Linear(factor)
    if attn == 1.0:
        return rule
    # a multiplier on cos/sin with no transformers rule to carry it: the rule's numbers, that factor
    r = resolve(rule, head_dim=head_dim, rotary_dim=n_rot, base=base)
    return Resolved(r.inv_freq, attn, r.rule, {**r.params, "attention_factor": attn},
                    r.original_window, r.target_window)


def _yarn(meta, p, factor, original, context, where):
    if original is None:
        raise ValueError(f"gguf: YaRN needs {p + 'rope.scaling.original_context_length'!r} or "
                         f"{p + 'context_length'!r} {where}")
    ext = meta.float(p + "rope.scaling.yarn_ext_factor")
    if ext is not None and ext != 1.0:
        raise ValueError(f"gguf: {p + 'rope.scaling.yarn_ext_factor'!r} = {ext!r}: pyrope's YaRN (transformers') "
                         f"blends with weight 1 {where}")
    log_mul = meta.float(p + "rope.scaling.yarn_log_multiplier", 0.0)
    mscale = mscale_all_dim = None
    if log_mul != 0.0:
        # llama-context.cpp: mscale_all_dim = yarn_log_multiplier, mscale = 1 (DeepSeek-V2: = mscale_all_dim)
        mscale_all_dim = log_mul
        mscale = log_mul if p == "deepseek2." and log_mul != 1.0 else 1.0
    return Yarn(factor=1.0 if factor is None else factor,  # llama.cpp: no factor is scale 1
                original_max_position_embeddings=original, max_position_embeddings=context,
                beta_fast=meta.positive(p + "rope.scaling.yarn_beta_fast", 32.0),
                beta_slow=meta.positive(p + "rope.scaling.yarn_beta_slow", 1.0),
                mscale=mscale, mscale_all_dim=mscale_all_dim,
                attention_factor=meta.positive(p + "rope.scaling.yarn_attn_factor"))
