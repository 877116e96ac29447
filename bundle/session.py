"""How a bundle's graph is opened in onnxruntime: the one set of session options.

The server serves with these options, the bench measures with them, and the parity gate checks
with them, so a figure measured at export or in the bench is a figure of the served session.
Inter-op parallelism is off: each run is one sequential pass over the graph, and a server that runs
several batches at once (graph_runs >= 2) runs them in separate threads on the same session, each run
using the session's intra-op threads. Intra-op threads default to the CPU cores this process may use
(the server shares them out among its runs). They spin between a run's operators, where a sleeping thread
would be woken again tens of times in each run, and stop spinning when the run ends
(`session.force_spinning_stop`), so an idle session leaves the CPU to the event loop and to other sessions. On
all-MiniLM-L6-v2 on 2 cores, against threads that sleep between operators, this took a lone 16-token run from 4.5
to 4.0 ms, a 128-token one from 22.3 to 20.4 ms and a batch of 32 x 16 from 79 to 74 ms, for the same CPU time
(`python -m bench.sessions B --settings served,sleep,spin --shapes 1x16,1x128,32x16`, medians of 5 rounds).
`spinning=True` keeps them spinning after a run too (onnxruntime's own default): less wake-up latency for the next
run, for CPU the event loop needs.

onnxruntime's memory pattern is off: with it, the second run of a shape allocates the whole planned block for that
shape while the arena still holds the first run's buffers, so a long input's peak grows from its second run on, for
no gain in time.

Its memory reuse is off too, but in the attention graph. With it, the allocation planner hands a dead tensor's buffer
to a later one, planned before the shapes are known; with a symbolic sequence length the buffers it keeps for reuse
stay allocated, so a layer's intermediate tensors pile up, and short batches run no faster for it. The attention
graph's (T, T) maps are the other way round: they reuse each other's buffers, so it keeps it. docs/performance.md
("How the service runs long inputs") measures both options, with the commands.

Pre-packing (onnxruntime re-lays each MatMul's constant weight out for its GEMM, in memory of the session's own) is on
for the fast graph and off for the attention graph. The two read one copy of the weights (bundle.weights); packed,
each session would hold a copy of its own beside it. The fast graph serves every request and keeps its speed; the
attention graph, an inspection path, reads the shared copy as it lies, about 10 to 20 % slower on CPU. With both
open, a ModernBERT-base-shaped bundle holds 1.6 GB packed twice, and 0.8 GB with neither packed
(docs/performance.md, "Weights held once", measures the three, with the command).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ORT_PROVIDERS = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def session_options(intra_op_threads: int = 0, spinning: bool = False, arena: bool = True, kind: str = "fast") -> Any:
    """The served options for a graph of `kind` (the manifest's); arena=False: onnxruntime's CPU arena off (bench.peak
    --no-arena measures what it holds)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = arena
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "0" if spinning else "1")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_mem_pattern = False  # see the module docstring
    options.enable_mem_reuse = kind == "attention"  # likewise
    # pre-packing: the fast graph only (module docstring)
    options.add_session_config_entry("session.disable_prepacking", "1" if kind == "attention" else "0")
    options.intra_op_num_threads = intra_op_threads or cpu_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def open_session(path: Path, provider: str = "cpu", intra_op_threads: int = 0, spinning: bool = False,
                 arena: bool = True, kind: str = "fast", initializers: Mapping[str, Any] | None = None) -> Any:
    """An onnxruntime session on `provider` ("cpu" or "cuda"; CUDA keeps the CPU provider for ops it lacks) for a
    graph of `kind` ("attention" keeps the memory reuse, module docstring). Opened by path, so onnxruntime finds a
    large graph's external data files beside it. `initializers`: name -> OrtValue the session uses instead of
    reading that tensor itself (bundle.weights: one copy for every session that reads it)."""
    import onnxruntime as ort

    if provider == "cuda":
        preload_cuda_libraries()
    providers = [ORT_PROVIDERS["cuda"], ORT_PROVIDERS["cpu"]] if provider == "cuda" else [ORT_PROVIDERS["cpu"]]
    options = session_options(intra_op_threads, spinning, arena, kind)
    for name, value in (initializers or {}).items():
        options.add_initializer(name, value)
    session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
    session.attnserve_initializers = dict(initializers or {})  # onnxruntime reads their buffers, owns none of them
    return session


def shrinking_run() -> Any:
    """Run options under which a run ends by giving back the CPU arena's free chunks (onnxruntime's
    `memory.enable_memory_arena_shrinkage`): a run that follows a warm-up at a shape traffic may never reach, so the
    arena holds what requests need from then on, not what the warm-up grew it to (inference.served)."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


@functools.cache
def preload_cuda_libraries() -> None:
    """Loads the CUDA and cuDNN libraries that onnxruntime-gpu's `cuda` and `cudnn` extras install as NVIDIA wheels
    (site-packages/nvidia/...), which the dynamic loader does not search by itself. onnxruntime >= 1.21 has
    `preload_dlls`; an older one, or the CPU build, finds CUDA where the system keeps it or not at all. Once."""
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()


def cuda_unavailable_reason() -> str:
    """Why a session asked for CUDA did not run on it, as far as the driver can tell: no driver library (no GPU
    passed into this container), no device, or else a library onnxruntime's CUDA provider needs."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "the NVIDIA driver's libcuda.so.1 cannot be loaded: no GPU driver here (a container needs --gpus all)"
    count = ctypes.c_int(0)
    status = driver.cuInit(0)
    if status == 0:
        status = driver.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        return f"the NVIDIA driver cannot start CUDA (cuInit/cuDeviceGetCount error {status})"
    if count.value == 0:
        return "the NVIDIA driver sees no CUDA device"
    return "onnxruntime could not create its CUDA provider; its log above names the CUDA or cuDNN library missing"
