"""A model's weights and devices as attnflow reads them, also for a model dispatched over devices.

A model loaded with ``device_map`` (accelerate's big-model inference) may keep some modules' weights off
the device they run on: offloaded to the CPU or to disk, they sit on the ``meta`` device between calls,
and accelerate's hooks bring them in for the module's own forward only. Methods that read a weight
directly (the norm weighting's output projection, logit paths' unembedding rows, a LayerNorm's scale,
the mean input embedding) read it through ``parameter``, which brings an offloaded module's weights
in for the read (accelerate's ``align_module_device``); and inputs go where the model takes them
(``input_device``), not where its first parameter happens to be.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from attnflow.errors import AttnflowError


def offloaded(module: Any) -> bool:
    """True when accelerate keeps ``module``'s weights off its execution device between calls."""
    hook = getattr(module, "_hf_hook", None)
    return bool(getattr(hook, "offload", False)) or any(
        bool(getattr(h, "offload", False)) for h in getattr(hook, "hooks", ()) or ())


@contextmanager
def present(module: Any) -> Iterator[Any]:
    """``module`` with its own parameters readable for the block (brought in where offloaded)."""
    if not offloaded(module):
        yield module
        return
    from accelerate.utils import align_module_device

    with align_module_device(module):
        yield module


def parameter(module: Any, name: str = "weight") -> torch.Tensor | None:
    """``module``'s parameter ``name``, detached (a copy where accelerate offloads it: the copy outlives
    the read); None where the module has none."""
    with present(module):
        value = getattr(module, name, None)
        if value is None:
            return None
        return value.detach().clone() if offloaded(module) else value.detach()


def dtype_name(model: Any) -> str | None:
    """What ``model``'s floating-point weights are in ("float32", "bfloat16", ...); None without any."""
    found = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    return None if found is None else str(found).removeprefix("torch.")


def refuse_overflow(model: Any, values: Any, what: str) -> None:
    """Refuse in a sentence, with the next step, when ``model`` is in float16 or bfloat16 and ``values``
    (a tensor or an array of its logits, weights or scores) are not all finite: its numbers overflowed
    (float16 ends at 65504; Gemma 3 270M's residual stream passes it at the 8th layer). ``what`` says what
    came out so, e.g. ``"rollout gave infinite or NaN scores"``. Float32 and wider models are left as
    they compute."""
    import numpy as np

    name = dtype_name(model)
    if name not in ("float16", "bfloat16"):
        return
    finite = bool(torch.isfinite(values).all()) if isinstance(values, torch.Tensor) else bool(np.isfinite(values).all())
    if finite:
        return
    wider = "bfloat16 or float32" if name == "float16" else "float32"
    raise AttnflowError(f"{what}: the model's numbers overflow in {name} on this input; load it in {wider} "
                        "(dtype=..., --dtype)")


def input_device(model: Any) -> torch.device:
    """Where ``model`` takes its input ids: the input embedding's execution device for a model dispatched
    with ``device_map``, else the device of its parameters."""
    embeddings = getattr(model, "get_input_embeddings", lambda: None)()
    hook = getattr(embeddings, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is not None:
        return torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")
