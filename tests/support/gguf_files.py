"""Small valid GGUF files written by the gguf package's own writer: the seed corpus of
the GGUF fuzz target (tests/fuzz/fuzz_gguf.py) and the files the hostile-file tests
mutate. Each covers metadata ``Rope.from_gguf`` reads (and some it skips: a
tokenizer's strings, every value type), little- and big-endian."""
import os
import tempfile

import numpy as np


def _write(arch, kv, tensors=(), big_endian=False):
    """The bytes of a GGUF file holding ``kv`` (key -> (writer method, value)) and ``tensors``."""
    import gguf
    fd, path = tempfile.mkstemp(suffix=".gguf")
    os.close(fd)
    try:
        endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
        w = gguf.GGUFWriter(path, arch, endianess=endian)
        for key, (method, value) in kv.items():
            getattr(w, method)(key.format(arch=arch), value)
        for name, values in dict(tensors).items():
            w.add_tensor(name, values)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def u32(v):
    return ("add_uint32", v)


def f32(v):
    return ("add_float32", v)


def text(v):
    return ("add_string", v)


def array(v):
    return ("add_array", list(v))


LLAMA = {"{arch}.context_length": u32(4096), "{arch}.embedding_length": u32(256),
         "{arch}.block_count": u32(4), "{arch}.attention.head_count": u32(4),
         "{arch}.rope.dimension_count": u32(64)}


def seed_files():
    """``{name: bytes}``: the seed corpus."""
    pairs = np.linspace(1.0, 4.0, 32, dtype=np.float32)   # one per pair of rotary_dim 64
    every_type = {
        **LLAMA,
        "tokenizer.ggml.tokens": array(["<s>", "</s>", "h\u00e9", "\u4e16"]),
        "tokenizer.ggml.scores": array([0.0, -1.5, 2.0, 0.25]),
        "general.flag": ("add_bool", True), "general.u8": ("add_uint8", 7), "general.i8": ("add_int8", -7),
        "general.u16": ("add_uint16", 700), "general.i16": ("add_int16", -700), "general.i32": ("add_int32", -7),
        "general.u64": ("add_uint64", 2**40), "general.i64": ("add_int64", -2**40),
        "general.f64": ("add_float64", 0.1), "general.bools": array([True, False, True]),
    }
    return {
        "llama_plain": _write("llama", LLAMA),
        "llama_every_type": _write("llama", every_type),
        "llama_big_endian": _write("llama", every_type, big_endian=True),
        "qwen2_key_length": _write("qwen2", {"{arch}.attention.key_length": u32(128),
                                             "{arch}.rope.freq_base": f32(1000000.0)}),
        "llama_linear": _write("llama", {**LLAMA, "{arch}.rope.scaling.type": text("linear"),
                                         "{arch}.rope.scaling.factor": f32(4.0)}),
        "llama_yarn": _write("llama", {**LLAMA, "{arch}.rope.scaling.type": text("yarn"),
                                       "{arch}.rope.scaling.factor": f32(4.0),
                                       "{arch}.rope.scaling.original_context_length": u32(1024),
                                       "{arch}.rope.scaling.yarn_beta_fast": f32(32.0),
                                       "{arch}.rope.scaling.yarn_log_multiplier": f32(0.1)}),
        "phi3_longrope": _write("phi3", {**LLAMA, "{arch}.rope.scaling.type": text("longrope"),
                                         "{arch}.rope.scaling.original_context_length": u32(1024),
                                         "{arch}.rope.scaling.attn_factor": f32(1.2)},
                                {"rope_factors_long.weight": pairs * 2, "rope_factors_short.weight": pairs}),
        "llama_rope_freqs": _write("llama", LLAMA, {"rope_freqs.weight": pairs}),
        "llama_rope_freqs_f16": _write("llama", LLAMA, {"rope_freqs.weight": pairs.astype(np.float16)}),
        "gemma3_sliding": _write("gemma3", {"{arch}.attention.key_length": u32(64),
                                            "{arch}.block_count": u32(3), "{arch}.rope.freq_base": f32(1e6),
                                            "{arch}.rope.freq_base_swa": f32(1e4),
                                            "{arch}.attention.sliding_window_pattern": array([True, True, False])}),
        "llama_heads_per_layer": _write("llama", {**LLAMA, "{arch}.attention.head_count": array([4, 0, 8, 4])}),
        "qwen2vl_sections": _write("qwen2vl", {"{arch}.attention.key_length": u32(128),
                                               "{arch}.rope.dimension_sections": array([16, 24, 24, 0])}),
        "deepseek2_mla": _write("deepseek2", {"{arch}.attention.key_length": u32(192),
                                              "{arch}.attention.kv_lora_rank": u32(512),
                                              "{arch}.rope.dimension_count": u32(64),
                                              "{arch}.rope.scaling.attn_factor": f32(1.5)}),
    }


if __name__ == "__main__":   # write the corpus: python tests/support/gguf_files.py tests/fuzz/gguf_corpus
    import sys
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in seed_files().items():
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)
        print(f"{name}.gguf: {len(data)} bytes")
