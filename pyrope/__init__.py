"""pyrope: rotary position embedding (RoPE) for the CPU.

``Rope`` resolves a configuration (layout, head_dim, rotary_dim, base,
scaling) to exact float64 frequencies and applies it to float32 query/key
arrays with a SIMD C kernel. ``pyrope.reference`` is the standard-library
reference the kernel is tested against.
"""
from ._kernel import forced_isa, get_isa, set_isa, supported_isas
from .errors import RopeError
from .rope import Rope

__version__ = "0.1.0"
__all__ = ["Rope", "RopeError", "forced_isa", "get_isa", "set_isa", "supported_isas", "__version__"]
