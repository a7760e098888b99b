"""Where the analyses run, and the ZeroGPU hook.

On a CUDA machine the analyses run on the GPU (our Triton kernels); otherwise on the CPU. Every
function that touches the GPU is decorated with ``@gpu(duration=...)``. On a Hugging Face ZeroGPU
Space (the ``spaces`` package, ``SPACES_ZERO_GPU=true``) that is ``spaces.GPU``: each call asks for a
GPU for ``duration`` seconds, its arguments and its result are pickled, and the function runs in a
worker process forked from the server. So a GPU function takes and returns only picklable values
(configs, tensors on the CPU, ``TrainedWeights``, a ``explorer.runtime.signals.StopToken``, never a
lambda), reads nothing the server changes after the fork (no module global, no context variable:
trained weights are an argument) and does a bounded piece of work (one sweep length, one burst of
training steps). Elsewhere ``spaces.GPU`` returns the function itself and ``gpu`` adds only:
- ``TRITON_CACHE_DIR`` (``explorer.runtime.settings.triton_cache_dir``) made and set on the first call
  that finds CUDA, so compiled kernels outlive the process;
- ``record_gpu_calls()``: the calls made in the enclosed block, with their arguments and results
  (tests pickle them; a benchmark counts the GPU calls of one click).
A GPU function that calls another (``compare_pair`` calls ``attention_maps``) makes one GPU call: the
inner one runs directly, as ``spaces`` itself does inside its worker.

Nothing here touches CUDA outside a GPU call: ``device()`` is the CPU there (nothing may run on the
GPU), the header's ``hardware_label()`` reads the driver's files, and ``on_cpu()`` runs the start-up
first paint on the CPU without a GPU call.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

import torch

from explorer.runtime import settings

ZERO_GPU = os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "t", "true")  # as ``spaces`` reads it
spaces = None
if ZERO_GPU:  # off ZeroGPU ``spaces.GPU`` returns the function itself: skip its 0.8 s import there
    try:
        import spaces  # type: ignore  # before anything initialises CUDA, as ZeroGPU requires
    except ImportError:
        spaces = None

DEFAULT_DURATION = 60  # seconds, ZeroGPU's own default
_RECORDERS: list = []  # lists that record_gpu_calls() is filling
_RECORD_LOCK = threading.Lock()
_LOCAL = threading.local()  # .depth: inside a GPU call (this thread); .cpu: on_cpu() forces the CPU
NVIDIA_PROC = "/proc/driver/nvidia/gpus"  # the driver's description of each GPU: read without touching CUDA


def gpu(fn=None, *, duration=DEFAULT_DURATION):
    """Mark ``fn`` as a GPU function that runs at most ``duration`` seconds (an int, or a function of
    the call's arguments returning one); usable as ``@gpu`` and ``@gpu(duration=...)``."""
    if fn is None:
        return functools.partial(gpu, duration=duration)

    @functools.wraps(fn)
    def on_device(*args, **kwargs):  # what runs on the GPU side (a forked worker on ZeroGPU)
        _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
        try:
            if device().type == "cuda":
                triton_cache()
            return fn(*args, **kwargs)
        finally:
            _LOCAL.depth -= 1

    task = spaces.GPU(on_device, duration=duration) if spaces is not None else on_device

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if getattr(_LOCAL, "depth", 0):  # inside another GPU call: already on the device
            return fn(*args, **kwargs)
        if getattr(_LOCAL, "cpu", False):  # on_cpu(): no GPU call at all
            return on_device(*args, **kwargs)
        result = task(*args, **kwargs)
        if _RECORDERS:
            with _RECORD_LOCK:
                for calls in _RECORDERS:
                    calls.append((fn.__module__ + "." + fn.__qualname__, args, kwargs, result))
        return result

    call.gpu_duration = duration
    call.gpu_function = fn  # the undecorated function
    call.on_device = on_device  # what ``spaces.GPU`` wraps: runs in its worker
    return call


@contextlib.contextmanager
def on_cpu():
    """GPU functions called in the block (this thread) run here on the CPU, with no GPU call: the app's
    first paint at start-up, which must neither wait for a GPU nor touch CUDA before the server forks."""
    before = getattr(_LOCAL, "cpu", False)
    _LOCAL.cpu = True
    try:
        yield
    finally:
        _LOCAL.cpu = before


@contextlib.contextmanager
def record_gpu_calls():
    """``[(qualified name, args, kwargs, result)]`` of every ``@gpu`` call that returned in the block
    (any thread)."""
    calls: list = []
    with _RECORD_LOCK:
        _RECORDERS.append(calls)
    try:
        yield calls
    finally:
        with _RECORD_LOCK:
            _RECORDERS.remove(calls)


def triton_cache() -> str:
    """Point Triton at the lasting cache folder (made on first use) unless ``TRITON_CACHE_DIR`` is set."""
    path = settings.triton_cache_dir()
    os.environ.setdefault(settings.TRITON_CACHE_DIR, path)
    os.makedirs(os.environ[settings.TRITON_CACHE_DIR], exist_ok=True)
    return os.environ[settings.TRITON_CACHE_DIR]


def device() -> torch.device:
    """Where a computation runs: CUDA inside a GPU call on a machine that has it, else the CPU. Outside a
    GPU call nothing runs on the GPU (ZeroGPU lends one only to a call), and CUDA is not even asked."""
    if getattr(_LOCAL, "depth", 0) and not getattr(_LOCAL, "cpu", False) and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def device_label(dev: torch.device | None = None) -> str:
    """E.g. ``"CUDA: NVIDIA H100 (sm_90)"`` or ``"CPU (2 threads per request)"``, for a device in use;
    with no device, the hardware the GPU calls get (the header), named without touching CUDA."""
    if dev is None:
        return hardware_label()
    dev = torch.device(dev)
    if dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        return f"CUDA: {torch.cuda.get_device_name(dev)} (sm_{major}{minor})"
    n = torch.get_num_threads()
    return f"CPU ({n} thread{'s' if n != 1 else ''} per request)"


def hardware_label() -> str:
    """``"ZeroGPU (a GPU per request)"`` on a ZeroGPU Space; ``"CUDA: <model>"`` from the NVIDIA driver's
    own description when this torch has CUDA; else the CPU label. Reads files, never CUDA: the server
    must not initialise CUDA before it forks (ZeroGPU) and a header needs no device."""
    if ZERO_GPU:
        return "ZeroGPU (a GPU per request)"
    if torch.backends.cuda.is_built() and not os.environ.get("CUDA_VISIBLE_DEVICES", "x") == "":
        names = []
        try:
            for gpu_dir in sorted(os.listdir(NVIDIA_PROC)):
                with open(os.path.join(NVIDIA_PROC, gpu_dir, "information")) as f:
                    names += [line.split(":", 1)[1].strip() for line in f if line.startswith("Model:")]
        except OSError:
            names = []
        if names:
            return f"CUDA: {names[0]}" + (f" (+{len(names) - 1})" if len(names) > 1 else "")
    return device_label(torch.device("cpu"))


def configure_threads() -> int:
    """Use ``EXPLORER_THREADS`` (default 1) intra-op threads and return the number.

    The app's requests are small (4 layers, ~128 tokens) and several visitors share two cores:
    one thread per request avoids oversubscription, which on a busy 2-core machine made a
    gradient-norm request 5-20x slower with 2 threads than with 1 (and a 4096-token forward 2x
    slower). The sweep uses the same number and records it.
    """
    n = default_threads()
    torch.set_num_threads(n)
    return n


def default_threads() -> int:
    """``EXPLORER_THREADS`` (``explorer.runtime.settings``)."""
    return settings.threads()
