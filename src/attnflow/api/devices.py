"""Where a model runs: one resolution of a device for every entry point and every batch worker.

- ``check_device``: refuse a device that is not "auto", "cpu", "cuda", "cuda:N" or "mps", and a CUDA
  request on a machine whose torch has no CUDA (a CPU-only build, or no GPU visible).
- ``pick_device``: the device a model given by name is loaded on ("auto" -> a GPU when torch sees one);
  a batch worker calls it on its own host (``host=True``: a refusal names the host, since on a cluster
  each worker resolves "auto" and checks "cuda:N" against its own GPUs).
- ``check_model_device``: a loaded model is used where it is.

torch is imported only when the installed torch has CUDA (read from its ``version.py`` first).
"""

from __future__ import annotations

import importlib.util
import re
import socket
from pathlib import Path
from typing import Any

from attnflow.errors import AttnflowError


def _torch_cuda_build() -> str | None:
    """The CUDA version the installed torch was built for, read from ``torch/version.py`` without
    importing torch ("" when that file cannot be read: then torch itself is asked)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text(encoding="utf-8")
    except OSError:
        return ""
    found = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*(.+)$", text, re.MULTILINE)
    if found is None:
        return ""
    value = found.group(1).strip()
    return None if value == "None" else value.strip("'\"")


def check_device(device: Any) -> None:
    """Refuse a device that is not "auto", "cpu", "cuda" or "cuda:N", and a CUDA request on a machine
    whose torch has no CUDA (a CPU-only build, or no GPU visible)."""
    text = str(device)
    if text in ("auto", "cpu"):
        return
    if text == "mps":
        import torch

        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise AttnflowError("device 'mps' asks for Apple's Metal GPU, and torch sees none here; "
                                "use --device cpu (or auto)")
        return
    found = re.fullmatch(r"cuda(?::(\d+))?", text)
    if found is None:
        raise AttnflowError(f"device (--device) must be auto, cpu, cuda, cuda:N or mps; got {device!r}")
    build = _torch_cuda_build()
    if build is None:
        raise AttnflowError(f"device {text!r} asks for a CUDA GPU, and the torch installed here is a CPU-only build; "
                            "use --device cpu (or auto), or install a CUDA build of torch")
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(found.group(1) or 0)
    if index >= count:
        have = f"{count} CUDA GPU{'s' * (count != 1)}" if count else "no CUDA GPU"
        raise AttnflowError(f"device {text!r} asks for CUDA GPU {index}, and torch sees {have} here; "
                            "use --device cpu (or auto)" + (f", or cuda:0 to cuda:{count - 1}" if count else ""))


def pick_device(device: Any, *, host: bool = False) -> str:
    """The torch device a model given by name is loaded on: ``device`` checked (``check_device``),
    "auto" -> the first CUDA GPU, else Apple's mps, else the CPU. ``host``: a refusal names this host
    (a batch worker's check of its own GPUs)."""
    try:
        check_device(device)
    except AttnflowError as exc:
        if not host:
            raise
        raise AttnflowError(f"on {socket.gethostname()}: {exc}") from None
    if str(device) != "auto":
        return str(device)
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


def check_model_device(model: Any, device: Any) -> None:
    """A loaded model is used where it is: a device other than "auto" that it is not on is refused
    (attnflow moves only the models it loads itself)."""
    if device is None or str(device) == "auto":
        return
    params = getattr(model, "parameters", None)
    first = next(params(), None) if callable(params) else None
    if first is None:
        return
    import torch

    here, wanted = first.device, torch.device(str(device))
    if here.type != wanted.type or (wanted.index is not None and here.index != wanted.index):
        raise AttnflowError(f"the model passed is on {here}, and device {str(device)!r} was asked for; attnflow "
                            f"moves only models it loads by name: call model.to({str(device)!r}) first, or leave "
                            "device as auto")
