"""Which backends of ``F.scaled_dot_product_attention`` can run here, and why not.

On a CUDA GPU, PyTorch chooses between FlashAttention, a memory-efficient kernel, cuDNN's
kernel and the plain ``math`` fallback. This module asks PyTorch's own APIs:
``torch.nn.attention.sdpa_kernel`` (allow one backend, torch >= 2.3) to run each backend,
and ``torch.backends.cuda.can_use_<backend>(SDPAParams(...), debug=True)`` to learn why a
CUDA backend refuses given inputs. Lesson 4's optional GPU cells use it through
:func:`course_utils.bench.compare_on_device`. On a CPU most backends cannot run; the
functions say so rather than fail.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from .mha import MultiHeadAttention
from .native_output import native_stderr_captured
from .validation import (
    check_choice,
    check_float_dtype,
    check_holds_values,
    check_matches_module,
    check_not_meta_device,
    check_sdpa_inputs,
    check_tensor,
    shown,
)

__all__ = [
    "SDPA_BACKENDS",
    "cuda_unavailable_reason",
    "backend_rejection_reason",
    "sdpa_backend_callables",
    "precision_notes",
]

#: Backends of ``F.scaled_dot_product_attention``: label -> ``torch.nn.attention.SDPBackend`` member.
SDPA_BACKENDS: dict[str, str] = {
    "flash": "FLASH_ATTENTION",
    "memory-efficient": "EFFICIENT_ATTENTION",
    "cuDNN": "CUDNN_ATTENTION",
    "math": "MATH",
}

#: ``torch.backends.cuda`` functions that say whether (and, with ``debug=True``, why not) a
#: backend accepts given inputs.
_CAN_USE: dict[str, str] = {
    "flash": "can_use_flash_attention",
    "memory-efficient": "can_use_efficient_attention",
    "cuDNN": "can_use_cudnn_attention",
}

#: Errors that only say "no backend was allowed" (CPU, CUDA): they add nothing to a reason.
_GENERIC_SDPA_ERRORS = ("No viable backend", "No available kernel")


def _sdpa_kernel_api():
    """``(SDPBackend, sdpa_kernel)`` from ``torch.nn.attention`` (torch >= 2.3), else ``None``."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    return SDPBackend, sdpa_kernel


def cuda_unavailable_reason() -> str | None:
    """``None`` when the GPU comparison can run, else one sentence saying why not: no CUDA
    GPU, or a PyTorch too old to choose the attention backend (``sdpa_kernel``, torch 2.3)."""
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            return "this PyTorch is a CPU-only build (torch.version.cuda is None)"
        return "this PyTorch has CUDA support but sees no GPU (torch.cuda.is_available() is False)"
    if _sdpa_kernel_api() is None:
        return (f"this PyTorch ({torch.__version__}) is older than 2.3, and the comparison needs "
                "torch.nn.attention.sdpa_kernel to choose each attention backend")
    return None


def _sdpa_params(q: Tensor, k: Tensor, v: Tensor):
    """``torch.backends.cuda.SDPAParams`` for unmasked, causal-free attention without dropout
    (torch >= 2.5 takes an extra ``enable_gqa`` flag); ``None`` if this PyTorch has none."""
    params_cls = getattr(torch.backends.cuda, "SDPAParams", None)
    if params_cls is None:
        return None
    for extra in ((False,), ()):
        try:
            return params_cls(q, k, v, None, 0.0, False, *extra)
        except TypeError:
            continue
    return None


def backend_rejection_reason(label: str, q: Tensor, k: Tensor, v: Tensor) -> str | None:
    """Ask PyTorch why CUDA backend ``label`` rejects ``q, k, v`` ``(B, h, T, dk)``. ``label`` is a
    key of :data:`SDPA_BACKENDS`: a value that is no str is a TypeError, another str a ValueError.

    Calls ``torch.backends.cuda.can_use_<backend>(SDPAParams(...), debug=True)``. ``None``
    when the backend accepts the inputs, when this PyTorch lacks the function (e.g.
    ``can_use_cudnn_attention`` before 2.4) or its check cannot run. When it refuses, the
    reason is the debug warnings it raised (without PyTorch's "Triggered internally" tail) or
    printed to stderr from C++ (caught here, so none reaches the learner's output), or, failing
    both, a sentence naming the check that said no. A
    ``q``, ``k`` or ``v`` on the meta device (a shape without values, which no backend runs on), or
    shapes that do not fit together as one attention call (another ``dk``, ``Tk``, batch or head
    count; ``dk = 0``), is a ValueError naming it, not a ``None`` that would read as "accepted".
    """
    label = check_choice(label, "label", tuple(SDPA_BACKENDS))
    for tensor_name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, tensor_name, ndim=4, layout="(B, h, T, dk)")
        check_holds_values(t, tensor_name)  # a meta tensor (no values) is no run to ask about
    check_sdpa_inputs(q, k, v, None, False, 0.0)  # shapes no attention takes are no run to ask about either
    name = _CAN_USE.get(label, "")
    checker = getattr(torch.backends.cuda, name, None)
    params = _sdpa_params(q, k, v) if checker is not None else None
    if params is None:
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with native_stderr_captured() as printed:  # some builds print the reasons from C++
                usable = checker(params, True)
        except Exception:  # a check that cannot run tells us nothing
            return None
    if usable:
        return None
    reasons = [str(w.message).split("(Triggered internally")[0].strip() for w in caught]
    reasons += _printed_warnings(printed.text)
    return "; ".join(r for r in reasons if r) or f"torch.backends.cuda.{name} returned False"


_PRINTED_WARNING = re.compile(r"\] Warning: (.*?)(?: \(function \w+\))?\s*$")


def _printed_warnings(text: str) -> list[str]:
    """The messages of C++ warning lines (``[W... file:line] Warning: MESSAGE (function f)``)."""
    return [m.group(1).strip() for m in map(_PRINTED_WARNING.search, text.splitlines()) if m]


def sdpa_backend_callables(
    module: MultiHeadAttention, x: Tensor, backends: dict[str, str] | None = None
) -> tuple[dict[str, Callable[[], Tensor]], dict[str, str]]:
    """One callable per ``F.scaled_dot_product_attention`` backend that can run here.

    Each callable runs ``module(x)`` (the course module, whose forward calls
    ``F.scaled_dot_product_attention``) with only that backend allowed, via
    ``torch.nn.attention.sdpa_kernel``. Returns ``(callables keyed "F.sdpa [label]",
    {label: why it cannot run})``: a backend is skipped when this PyTorch lacks it or
    rejects these inputs (the device, dtype or head width); on CUDA the reason comes from
    :func:`backend_rejection_reason`. A member name that is neither one of
    :data:`SDPA_BACKENDS` nor in this PyTorch's ``SDPBackend`` is refused (ValueError).
    """
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"module must be a course MultiHeadAttention, got {type(module).__name__}")
    backends = SDPA_BACKENDS if backends is None else backends
    if not isinstance(backends, dict) or not backends:
        raise TypeError(f"backends must be a non-empty dict label -> SDPBackend member name (like "
                        f"SDPA_BACKENDS), got {type(backends).__name__} {shown(backends, 80)}")
    api = _sdpa_kernel_api()
    # the course's four (some absent from an older PyTorch: skipped below, with the reason) and
    # whatever this PyTorch has; any other name is a typo, not a backend to report as missing
    here = {m for m in dir(api[0]) if m.isupper() and m != "ERROR"} if api else set()
    known = set(SDPA_BACKENDS.values()) | here
    for label, member in backends.items():
        if member not in known:
            raise ValueError(f"backends[{shown(label)}] must name an SDPBackend member, one of "
                             f"{sorted(known)}, got {shown(member, 60)}")
    # x is checked here, so that a wrong shape is an error and not "no backend can run it"
    check_tensor(x, "x", ndim=3, layout=f"(B, T, d_model={module.d_model})")
    if x.shape[-1] != module.d_model:
        raise ValueError(f"x last dim must be d_model={module.d_model}, got shape {tuple(x.shape)}")
    check_matches_module(x, "x", module.out_proj.weight)
    if api is None:
        why = f"choosing a backend needs torch >= 2.3 (torch.nn.attention), found {torch.__version__}"
        return {}, {label: why for label in backends}
    SDPBackend, sdpa_kernel = api
    dtype_name = str(x.dtype).replace("torch.", "")
    fns: dict[str, Callable[[], Tensor]] = {}
    skipped: dict[str, str] = {}
    for label, member in backends.items():
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            skipped[label] = f"this PyTorch has no SDPBackend.{member}"
            continue

        def run(backend=backend) -> Tensor:
            with sdpa_kernel(backend):
                return module(x)[0]

        try:
            with warnings.catch_warnings(), torch.inference_mode():
                warnings.simplefilter("ignore")  # the refusal itself is the answer
                run()
        except Exception as exc:  # any refusal means "cannot run here"
            detail = None
            if x.device.type == "cuda":
                with torch.inference_mode():
                    q, k, v = module.project_qkv(x, x, x)  # (B, h, T, dk): what reaches SDPA
                detail = backend_rejection_reason(label, q, k, v)
            if detail is None:
                first = (str(exc).splitlines() or [""])[0]
                detail = "" if any(g in first for g in _GENERIC_SDPA_ERRORS) else first
            skipped[label] = (f"not available for {x.device.type} {dtype_name} inputs with head "
                              f"width {module.d_k}" + (f" ({detail[:200]})" if detail else ""))
            continue
        fns[f"F.sdpa [{label}]"] = run
    return fns, skipped


def precision_notes(device: str | torch.device, dtype: torch.dtype) -> list[str]:
    """A warning line when float32 matmuls on a CUDA device may run in TF32. ``dtype`` is a
    floating ``torch.dtype`` (attention has no integer form), not its name as a str. ``device`` is
    only parsed, not looked for (a note about ``"cuda:1"`` needs no GPU here): any CUDA device may
    get the note, and the CPU (or MPS) gets none, so ``[]``. The meta device is refused (ValueError
    naming ``device``): it computes no numbers, so it has no precision to note."""
    check_float_dtype(dtype, "dtype")
    if not isinstance(device, str | torch.device):
        raise TypeError(f"device must be a str or torch.device such as 'cuda', got {type(device).__name__}")
    try:
        parsed = torch.device(device)  # only parsed: a note about "cuda" needs no GPU here
    except RuntimeError:
        raise ValueError(f"device must be a device name such as 'cpu', 'cuda' or 'cuda:0', got "
                         f"{shown(device)}") from None
    check_not_meta_device(parsed, "device", asked=device)
    kind = parsed.type
    precision = torch.get_float32_matmul_precision()
    if kind != "cuda" or dtype != torch.float32 or precision == "highest":
        return []
    return [f"note: torch.get_float32_matmul_precision() is {shown(precision)}, so float32 matmuls may use "
            "TF32 (about 3 significant digits) and differ from the CPU by more than the tolerance; "
            "torch.set_float32_matmul_precision('highest') restores full float32."]
