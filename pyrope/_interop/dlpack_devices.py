"""DLPack device types: which memory the CPU addresses, and how messages name the others.

Shared by the tensor adapter (``pyrope._interop.views``, which checks a producer's
``__dlpack_device__``) and the capsule reader (``pyrope._interop.dlpack``, which checks
the capsule's own device), so neither imports the other for them.
"""

# DLDeviceType codes of memory the CPU addresses (those numpy.from_dlpack
# accepts: CPU, CUDA host (pinned), ROCm host, CUDA managed), and the others' names
CPU_DEVICES = {1: "CPU", 3: "CUDAHost", 11: "ROCMHost", 13: "CUDAManaged"}
DEVICES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCM", 12: "ExtDev",
           14: "OneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}
ELSEWHERE = "pyrope computes on the CPU and never copies between devices"


def device_name(code):
    """A DLPack device type for messages: ``"DLPack device CUDA (2)"``."""
    name = DEVICES.get(code) or CPU_DEVICES.get(code)
    return f"DLPack device {name} ({code})" if name else f"DLPack device type {code}"
