"""The JIT: fused kernels chosen by A* over loop parallelism, as C on the CPU and CUDA via NVRTC.

Entry points: `make_region(nodes, outputs)` checks that nodes form one kernel;
`compile_region(region)` returns the callable that runs it on NumPy values;
`find_regions(order, ...)` (jit/fusion.py) groups a scheduled graph into regions.
"""

from jit.domain import NotFusable
from jit.kernel import FusedKernel, Region, compile_region, enabled, make_region

__all__ = ["FusedKernel", "NotFusable", "Region", "compile_region", "enabled", "make_region"]
