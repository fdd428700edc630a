"""faithfulness(): is rollout (or flow, or raw attention) meaningful on *this* model and input?

    result = attnflow.faithfulness("The keys to the cabinet", "smollm2")
    result.meta["faithfulness"]          # per method and layer: LOO Spearman, AOPC compr./suff.
    result.print(); result.to_html("report.html")   # the report shows the numbers too

The model glue for :mod:`attnflow.evaluation.faithfulness` (which sees only a ``predict`` callable):
explain the input with the requested methods, build ``predict`` from the model (the classifier's
logits, or a decoder's next-token logits at the last position), and measure the explained output:
the predicted class, or the token the decoder predicts next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from attnflow.api.models import Loaded, is_name, resolve
from attnflow.api.text import _check_text, explain
from attnflow.capture.load import check_model_path, is_encoder_decoder_path, model_task, resolve_model
from attnflow.capture.text import encode, is_causal, max_length
from attnflow.errors import AttnflowError
from attnflow.evaluation.faithfulness import FRACTIONS, Faithfulness, evaluate
from attnflow.results import Attribution

BATCH = 32  # sequences per forward pass of the perturbed inputs

_NO_HEAD = ("faithfulness compares the scores with what the model predicts, so it needs a sequence-"
            "classification or causal language-model head")


def _refuse_without_head(name: str) -> None:
    """From the config alone, before any weight loads."""
    if is_encoder_decoder_path(name):
        raise AttnflowError(f"{name!r} is an encoder-decoder model; faithfulness covers classifiers and decoders")
    task = model_task(name)
    if task == "encoder":
        from pathlib import Path

        from attnflow.capture.load import read_config

        arch = (read_config(Path(name) / "config.json").get("architectures") or ["bare encoder"])[0]
        raise AttnflowError(f"{name!r} is a {arch} checkpoint, without a prediction head; {_NO_HEAD}")


def _head(loaded: Loaded) -> str:
    """"decoder" or "classifier" (from the architecture table, see :mod:`attnflow.api.models`), or a
    refusal for a model whose output is no prediction."""
    if loaded.family == "encoder-decoder":
        raise AttnflowError("encoder-decoder models are not covered; faithfulness covers classifiers and decoders")
    if is_causal(loaded.model) and loaded.model.get_output_embeddings() is not None:
        return "decoder"
    if loaded.head == "classification":
        return "classifier"
    raise AttnflowError(f"{type(loaded.model).__name__} has no sequence-classification or language-model head; "
                        f"{_NO_HEAD}")


def model_predict(model: Any, decoder: bool, batch_size: int = BATCH) -> Callable[[list[list[int]]], np.ndarray]:
    """``predict`` for :func:`attnflow.evaluation.faithfulness.evaluate`: token-id lists -> logits
    ``(batch, outputs)``. Sequences of equal length run together, so no padding (and no question of
    pad tokens, position ids or left/right padding) ever enters the comparison."""
    device = next(model.parameters()).device

    def predict(batch: list[list[int]]) -> np.ndarray:
        out: list[Any] = [None] * len(batch)
        by_length: dict[int, list[int]] = {}
        for i, ids in enumerate(batch):
            by_length.setdefault(len(ids), []).append(i)
        for rows in by_length.values():
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                x = torch.tensor([batch[i] for i in chunk], dtype=torch.long, device=device)
                with torch.no_grad():
                    logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits
                logits = logits[:, -1] if decoder else logits
                for i, row in zip(chunk, logits.double().cpu().numpy()):
                    out[i] = row
        return np.stack(out)

    return predict


def _input_ids(model: Any, tokenizer: Any, text: str, truncate: bool) -> list[int]:
    """The ids :func:`attnflow.capture.capture` runs the model on (same tokenizer call and limit)."""
    ids = encode(tokenizer, [text])["input_ids"][0]
    limit = max_length(model, tokenizer)
    if truncate and limit is not None and len(ids) > limit:
        ids = encode(tokenizer, [text], max_length=limit)["input_ids"][0]
    return ids.tolist()


def _label(model: Any, tokenizer: Any, decoder: bool, output: int) -> str:
    if decoder:
        return tokenizer.decode([output])
    id2label = getattr(model.config, "id2label", None) or {}
    return str(id2label.get(output, output))


def faithfulness(text: str, model: Any = None, *, tokenizer: Any = None, method: Any = "all",
                 fractions: Sequence[float] = FRACTIONS, positions: Sequence[int] | None = None,
                 fill_id: int | None = None, progress: Callable[[int, int], None] | None = None,
                 **options: Any) -> Attribution:
    """Explain ``text`` and measure how faithful each method is to the model's own prediction.

    model: a sequence classifier or a causal LM (a folder, a ``.gguf`` file, ``"smollm2"``, a hub id,
        or a loaded model with its ``tokenizer``); None: the default model (the bundled agreement
        classifier). A bare encoder (no head) or an encoder-decoder model is refused.
    method: anything :func:`attnflow.explain` takes ("all", a name, a list).
    options: passed to :func:`attnflow.explain` (``settings=`` or its keywords ``target``,
        ``residual``, ``head_fusion``, ``causal_norm``, ``solver``, ``truncate``, ``weighting``).
    fractions, positions, fill_id: see :func:`attnflow.evaluation.faithfulness.evaluate` (AOPC
        levels; which tokens are ranked and deleted, default all but special tokens and the target;
        replace instead of delete).

    Returns the :class:`~attnflow.results.Attribution` of :func:`attnflow.explain` with
    ``meta["faithfulness"]`` = :meth:`Faithfulness.to_dict` (per method and layer: ``spearman`` with
    the leave-one-out logit drop, AOPC ``comprehensiveness`` and ``sufficiency``; see
    ``docs/faithfulness.md``); :func:`faithfulness_report` turns it back into a :class:`Faithfulness`.
    """
    _check_text(text)
    if is_name(model):
        model = resolve_model(model)
        check_model_path(model)
        _refuse_without_head(model)
    loaded = resolve(model, tokenizer)
    model, tokenizer = loaded.model, loaded.tokenizer
    decoder = _head(loaded) == "decoder"
    result = explain(text, model, tokenizer=tokenizer, method=method, **options)
    ids = _input_ids(model, tokenizer, text, bool(result.params.get("truncate", False)))  # keyword or settings=
    if len(ids) != result.n_sources:  # the same tokenizer call as capture: a mismatch is a bug
        raise AttnflowError(f"internal: {len(ids)} token ids for a {result.n_sources}-token result")
    target = result.target_positions[result.target]
    if decoder and target != len(ids) - 1:
        raise AttnflowError("for a decoder, faithfulness explains the next-token prediction, read at the last "
                            f"position ({len(ids) - 1}); got target {target}")
    found = evaluate(model_predict(model, decoder), ids, result, positions=positions, special=result.meta.get("special", ()),
                     target=target, fractions=fractions, fill_id=fill_id, progress=progress)
    found.label = _label(model, tokenizer, decoder, found.output)
    found.meta = {"head": "decoder" if decoder else "classifier"}
    result.meta["faithfulness"] = found.to_dict()
    result.params["faithfulness"] = {"fractions": list(found.fractions), "deletion": found.deletion}
    return result


def faithfulness_report(result: Attribution) -> Faithfulness:
    """The :class:`Faithfulness` a result carries (``meta["faithfulness"]``), e.g. after ``attnflow.load``."""
    data = result.meta.get("faithfulness") if isinstance(result.meta, dict) else None
    if data is None:
        raise AttnflowError("this result carries no faithfulness numbers; make it with attnflow.faithfulness")
    return Faithfulness.from_dict(data)
