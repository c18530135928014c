"""pyrope: rotary position embedding (RoPE) for the CPU.

``Rope`` resolves a configuration (layout, head_dim, rotary_dim, base,
scaling) to exact float64 frequencies and applies it to float32 query/key
arrays with a SIMD C kernel. ``pyrope.reference`` is the standard-library
reference the kernel is tested against.
"""
from ._kernel import forced_isa, get_isa, set_isa, supported_isas
from .errors import RopeError
from .rope import Rope
from .onnx_interop import from_hf, from_vllm, onnx_caches, onnx_rotary_embedding, to_hf, to_vllm
from .positions import PartialRotary, apply_varlen, varlen_positions
from . import cache, check, layout, positions, testing

__version__ = "0.1.0"
__all__ = ["Rope", "RopeError", "PartialRotary", "apply_varlen", "varlen_positions",
           "onnx_rotary_embedding", "onnx_caches", "from_hf", "to_hf", "from_vllm", "to_vllm",
           "cache", "check", "layout", "positions", "testing", "forced_isa", "get_isa", "set_isa", "supported_isas", "__version__"]
