"""pyrope: rotary position embedding (RoPE) for the CPU.

``Rope`` resolves a configuration (layout, head_dim, rotary_dim, base,
scaling) to exact float64 frequencies and applies it to query/key
arrays (float32, float16, bfloat16, float64) with SIMD C kernels on all
cores. ``pyrope.reference`` is the standard-library
reference the kernel is tested against. Long-context frequency rules
(PI, NTK, YaRN, Llama 3, LongRoPE, ...) live in ``pyrope.scaling``, model
configs are read by ``pyrope.config`` and the contract is ``pyrope.contract``.

``import pyrope`` loads the core only: what it takes to resolve a rope and
rotate with it (plus the numpy-only ``cache``, ``layout``, ``positions`` and
``onnx_interop`` helpers). The tools (``check``, ``testing``, ``reference``,
``cli``, ``demo``, ``spectrum``, ``benchmark``, ``gguf``) load on first use, as
``pyrope.check`` or ``import pyrope.check``. No optional package loads with it,
ml_dtypes neither: bfloat16 arrays are served once their caller has imported it.
"""
import importlib as _importlib
import os as _os

from ._engine import isa as _isa
from ._engine.isa import forced_isa, get_isa, get_num_threads, set_isa, set_num_threads, supported_isas
from .config import load_hf_config, rope_arguments_from_hf_config
from .contract import fingerprint, make_contract, resolved_from_contract
from .errors import RopeError
from .norm import RMSNorm
from .quant import Q8_0, dequantize
from .rope import Rope
from .scaling import (NTK, Default, Dynamic, FreqFactors, Llama3, Linear, LongRope, Proportional,
                      Resolved, Yarn, resolve)
from .onnx_interop import from_hf, from_vllm, onnx_caches, onnx_rotary_embedding, to_hf, to_vllm
from .positions import PartialRotary, apply_varlen, multimodal_positions, varlen_positions
from . import cache, layout, positions

# tools: submodules loaded on first attribute access (PEP 562), never by `import pyrope`
_LAZY_SUBMODULES = ("check", "testing", "reference", "cli", "demo", "spectrum", "benchmark", "gguf")

__version__ = "0.3.0"


def _warn_about_the_environment():
    """A bad PYROPE_ISA / PYROPE_NUM_THREADS: a RuntimeWarning naming it (the default is
    used), except when the command line is starting, which refuses it in one line."""
    import os
    import sys
    argv = getattr(sys, "orig_argv", sys.argv)
    if os.path.basename(sys.argv[0]) == "pyrope" or argv[1:3] == ["-m", "pyrope"]:
        return
    import warnings
    for exc in _isa.ENVIRONMENT_ERRORS:
        warnings.warn(f"{exc}; ignored, using the default", RuntimeWarning, stacklevel=3)


if _isa.ENVIRONMENT_ERRORS:
    _warn_about_the_environment()
__all__ = ["Rope", "RopeError", "RMSNorm", "Q8_0", "dequantize", "forced_isa", "get_isa", "set_isa", "supported_isas", "__version__",
           "get_num_threads", "set_num_threads",
           "resolve", "Resolved", "Default", "Linear", "NTK", "Dynamic", "Yarn", "Llama3", "LongRope",
           "Proportional", "FreqFactors", "load_hf_config", "rope_arguments_from_hf_config",
           "make_contract", "fingerprint", "resolved_from_contract",
           "PartialRotary", "apply_varlen", "varlen_positions", "multimodal_positions", "onnx_rotary_embedding", "onnx_caches",
           "from_hf", "to_hf", "from_vllm", "to_vllm", "cache", "check", "layout", "positions", "testing",
           "get_include", "get_library_path"]


def get_include():
    """The directory holding ``pyrope.h``, the header of the C library.

    Compile C or C++ against it with ``-I`` (it needs no other header); the
    library is in :func:`get_library_path`. Like ``numpy.get_include()``, this
    only names the directory of the installed package (the build put the
    header there).
    """
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


def get_library_path():
    """The directory holding ``libpyrope.so``, the C library of pyrope's C API.

    It also holds ``libpyrope.so.<ABI>`` (the soname, which programs load) and
    ``pkgconfig/pyrope.pc``: with ``PKG_CONFIG_PATH`` set to that directory,
    ``pkg-config --cflags --libs pyrope`` gives the flags to compile and link
    against it (with an rpath to this directory). Like :func:`get_include`,
    this only names the directory.
    """
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "lib")


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        # import_module binds the submodule in this namespace, so this runs once per name
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
