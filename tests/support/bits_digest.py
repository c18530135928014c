"""Digests of every number pyrope computes, to compare across numpy's CPU dispatch.

``digests()`` returns ``{section: sha256 hex}`` for the frequencies and attention
factors of every rule over a grid of bases, dims and parameters, the
fingerprints of the family configs, cos/sin tables (float32 and float64), and
rotations (every dtype, both layouts, every instruction set this CPU runs).
The inputs are built from integers, so they are the same bits wherever this runs.

Run as a script it prints ``{"numpy_features": [...], "digests": {...}}`` as
JSON: tests/rules/test_same_bits.py runs it with numpy limited to its baseline
(``NPY_DISABLE_CPU_FEATURES``) and compares with the digests computed in its
own process.
"""
import hashlib
import json
import sys

import numpy as np

import hf_configs as H
import pyrope
from pyrope import scaling as S

BASES = (10000.0, 500000.0, 1e6, 12345.678, 1.5, 2.0e8)
DIMS = (4, 6, 32, 80, 96, 128, 160, 256)
LONG_FACTORS = [1.0 + i / 10 for i in range(128)]


def rules(d):
    """One of each rule, with parameters a real config would carry, for rotary_dim ``d``."""
    return [
        None,
        S.Linear(8.0),
        S.NTK(3.0),
        S.Dynamic(2.0, 4096, seq_len=10000),
        S.Dynamic(alpha=1000.0),
        S.Yarn(factor=4.0, original_max_position_embeddings=32768),
        S.Yarn(factor=40.0, original_max_position_embeddings=4096, truncate=False, mscale=1.0, mscale_all_dim=1.0),
        S.Yarn(factor=32.0, original_max_position_embeddings=4096, beta_fast=16.0, beta_slow=0.5, mscale=0.707,
               mscale_all_dim=1.0),
        S.Llama3(8.0, 1.0, 4.0, 8192, 131072),
        S.LongRope(LONG_FACTORS[:d // 2], [2.0 + i for i in range(d // 2)], 4096, 131072, seq_len=8000),
        S.LongRope(LONG_FACTORS[:d // 2], [2.0 + i for i in range(d // 2)], 4096, 131072),
        S.Proportional(partial_rotary_factor=0.5),
        S.FreqFactors(LONG_FACTORS[:d // 2]),
    ]


def resolved_numbers():
    """``(rule, base, dim, inv_freq as hex list, attention factor hex, params)`` over the grid."""
    out = []
    for base in BASES:
        for d in DIMS:
            for rule in rules(d):
                try:
                    r = S.resolve(rule, head_dim=d, rotary_dim=d, base=base)
                except pyrope.RopeError as e:  # a rule the grid point cannot serve: the refusal itself
                    out.append((repr(rule), base, d, type(e).__name__))
                    continue
                out.append((r.rule, base, d, [v.hex() for v in r.inv_freq.tolist()], r.attention_factor.hex(),
                            json.dumps(r.params, sort_keys=True)))
    return out


FAMILIES = ("LLAMA2_7B", "LLAMA31_8B", "LLAMA32_1B", "QWEN25_7B_YARN", "GPT_OSS_20B", "PHI3_128K", "PHI2",
            "STABLELM2_1_6B", "PROPORTIONAL_V5", "DEEPSEEK_V3", "DEEPSEEK_V2_LITE", "HUNYUAN_7B", "SMOLLM3_3B",
            "GLM4_9B", "COHERE2_7B", "GPTJ_6B", "PYTHIA_1B")


def fingerprints():
    return [(name, pyrope.Rope.from_hf_config(getattr(H, name)).fingerprint) for name in FAMILIES]


def _inputs(shape, dtype, seed):
    """Integers scaled by a power of two: exact in every dtype, the same everywhere."""
    ints = np.random.default_rng(seed).integers(-2**10, 2**10, size=shape)
    return (ints.astype(np.float64) / 2**7).astype(dtype)


def _dtypes():
    out = [np.float32, np.float16, np.float64]
    try:
        import ml_dtypes
        out.append(ml_dtypes.bfloat16)
    except ImportError:
        pass
    return out


def tables_and_rotations():
    """Bytes of tables and rotated arrays, per instruction set."""
    parts = []
    positions = np.concatenate([np.arange(300), np.array([4095, 8191, 131071, 2**20 + 7, 2**31 - 1])])
    ropes = [pyrope.Rope.from_hf_config(H.LLAMA31_8B), pyrope.Rope.from_hf_config(H.QWEN25_7B_YARN),
             pyrope.Rope(96, layout="interleaved", base=1e6, rotary_dim=64),
             pyrope.Rope.from_hf_config(H.PHI3_128K, seq_len=9000)]
    for isa in pyrope.supported_isas():
        with pyrope.forced_isa(isa):
            for i, rope in enumerate(ropes):
                cos, sin = rope.cos_sin(positions)
                cos64, sin64 = rope.cos_sin(positions[:40], dtype=np.float64)
                parts.append((isa, i, "tables", hashlib.sha256(cos.tobytes() + sin.tobytes() + cos64.tobytes()
                                                               + sin64.tobytes()).hexdigest()))
                for dtype in _dtypes():
                    x = _inputs((2, 37, 3, rope.head_dim), dtype, seed=i)
                    rotated = rope.apply(x, offset=1000)
                    at = rope.apply(x[:, :5], positions=positions[-5:])
                    parts.append((isa, i, np.dtype(dtype).name,
                                  hashlib.sha256(rotated.tobytes() + at.tobytes()).hexdigest()))
    return parts


def digests():
    sections = {"rules": resolved_numbers(), "fingerprints": fingerprints(), "kernels": tables_and_rotations()}
    return {name: hashlib.sha256(json.dumps(value).encode()).hexdigest() for name, value in sections.items()}


def _multiarray():
    try:
        from numpy._core import _multiarray_umath
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath
    return _multiarray_umath


def numpy_features():
    """The CPU features numpy's dispatch may use in this process."""
    return sorted(name for name, on in _multiarray().__cpu_features__.items() if on)


def dispatch_targets():
    """The targets numpy's run-time dispatch can pick above its baseline (its names:
    ``NPY_DISABLE_CPU_FEATURES`` set to all of them leaves numpy at its baseline)."""
    return list(_multiarray().__cpu_dispatch__)


if __name__ == "__main__":
    if sys.argv[1:] == ["--dispatch-targets"]:  # for the Makefile's test-baseline
        print(" ".join(dispatch_targets()))
    else:
        json.dump({"numpy_features": numpy_features(), "digests": digests()}, sys.stdout)
