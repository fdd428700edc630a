"""faithfulness(): is rollout (or flow, or raw attention) meaningful on *this* model and input?

    result = attnflow.faithfulness("The keys to the cabinet", "smollm2")
    result.meta["faithfulness"]          # per method and layer: LOO Spearman, AOPC compr./suff.
    result.print(); result.to_html("report.html")   # the report shows the numbers too

The model glue for ``attnflow.evaluation.faithfulness`` (which sees only a ``predict`` callable):
explain the input with the requested methods, build ``predict`` from the model (the classifier's
logits, or a decoder's next-token logits at the last position), and measure the explained output:
the predicted class, or the token the decoder predicts next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from attnflow.api.models import inspect, is_name, resolve
from attnflow.api.prediction import (  # noqa: F401  (model_predict, estimate, ... are this module's API too)
    PassEstimate,
    _head,
    _input_ids,
    _label,
    _refuse_without_head,
    estimate,
    model_predict,
    rows_per_pass,
)
from attnflow.api.text import _check_text, explain
from attnflow.config.settings import UNSET, Settings
from attnflow.errors import AttnflowError
from attnflow.evaluation.faithfulness import FRACTIONS, Faithfulness, evaluate
from attnflow.results import Attribution

@Settings.keywords
def faithfulness(text: str, model: Any = None, *, tokenizer: Any = None, method: Any = "all",
                 fractions: Sequence[float] = FRACTIONS, positions: Sequence[int] | None = None,
                 fill_id: int | None = None, progress: Callable[[int, int], None] | None = None,
                 settings: Settings | None = None, device: str = UNSET, dtype: str = UNSET,
                 **options: Any) -> Attribution:
    """Explain ``text`` and measure how faithful each method is to the model's own prediction.

    Args:
        text: The input.
        model: A sequence classifier or a causal LM (a folder, a ``.gguf`` file, ``"smollm2"``, a hub
            id, or a loaded model with its ``tokenizer``); None: the default model (the bundled
            agreement classifier). A bare encoder (no head) or an encoder-decoder model is refused.
        tokenizer: The tokenizer of a loaded ``model``.
        method: Anything [`explain`][attnflow.api.text.explain] takes ("all", a name, a list).
        fractions: The AOPC levels: the fractions of the ranked tokens deleted (see
            ``attnflow.evaluation.faithfulness.evaluate``).
        positions: Which tokens are ranked and deleted. None: all but special tokens and the target.
        fill_id: A token id that replaces a deleted token instead of removing it.
        progress: Called as ``progress(done, total)`` as the model is re-run.
        settings: A [`Settings`][attnflow.config.settings.Settings], as in
            [`explain`][attnflow.api.text.explain].
        device: Where a model given by name loads, as in [`explain`][attnflow.api.text.explain] (a
            setting).
        dtype: What a model given by name is loaded in, as in
            [`explain`][attnflow.api.text.explain] (a setting).
        **options: Any other setting by its name, on top of ``settings`` (``target``, ``residual``,
            ``head_fusion``, ``causal_norm``, ``solver``, ``truncate``, ``weighting``), as in
            [`explain`][attnflow.api.text.explain].

    Returns:
        The [`Attribution`][attnflow.results.attribution.Attribution] of
            [`explain`][attnflow.api.text.explain] with ``meta["faithfulness"]`` =
            ``Faithfulness.to_dict()`` (per method and layer: ``spearman`` with the leave-one-out
            logit drop, AOPC ``comprehensiveness`` and ``sufficiency``; see the Faithfulness guide);
            ``attnflow.faithfulness_report`` turns it back into a ``Faithfulness``.

    Raises:
        AttnflowError: A model without a prediction head, a decoder target other than the last
            position, or fewer than 2 tokens to rank.

    Examples:
        >>> import attnflow
        >>> result = attnflow.faithfulness("the keys to the cabinet", method="rollout")
        >>> numbers = result.meta["faithfulness"]
        >>> numbers["label"]  # the prediction measured
        'plural'
        >>> rho = numbers["methods"]["rollout"]["spearman"]  # per layer, vs leave-one-out
        >>> [round(r, 2) for r in rho]
        [0.9, 0.7, 0.7, 0.7, 0.7, 0.7]
    """
    _check_text(text)
    if is_name(model):
        model = inspect(model)  # named once, its config read once
        _refuse_without_head(model)
    settings = Settings.build(settings, device=device, dtype=dtype)  # the setting keywords in ``options`` go on top in explain
    loaded = resolve(model, tokenizer, device=settings.device, dtype=settings.dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    decoder = _head(loaded) == "decoder"
    # it measures the methods asked for, no more (`attnflow faithfulness --method all` adds the decoder defaults);
    # the model bound here is the one explained (resolved once)
    result = explain(text, loaded, method=method, paper_only=True, settings=settings, **options)
    ids = _input_ids(model, tokenizer, text, bool(result.params.get("truncate", False)))  # keyword or settings=
    if len(ids) != result.n_sources:  # the same tokenizer call as capture: a mismatch is a bug
        raise AttnflowError(f"internal: {len(ids)} token ids for a {result.n_sources}-token result")
    target = result.target_positions[result.target]
    if decoder and target != len(ids) - 1:
        raise AttnflowError("for a decoder, faithfulness explains the next-token prediction, read at the last "
                            f"position ({len(ids) - 1}); got target {target}")
    predict = model_predict(model, decoder)
    from attnflow.evaluation.faithfulness import default_positions

    ranked = len(positions) if positions is not None else len(
        default_positions(len(ids), result.meta.get("special", ()), target))
    if ranked < 2:  # refused before any estimate of passes that will never run
        raise AttnflowError(f"faithfulness ranks the tokens besides the target and special tokens, and needs at "
                            f"least 2; {text!r} has {ranked} ({len(ids)} tokens in all): give a longer text")
    if progress is not None and hasattr(progress, "estimate"):  # the CLI's bar prints it before the passes
        rows = sum(np.atleast_2d(result.row(m)).shape[0] for m in result.methods)
        progress.estimate(estimate(model, ids, ranked, rows, fractions, methods=len(result.methods), decoder=decoder))
    found = evaluate(predict, ids, result, positions=positions, special=result.meta.get("special", ()),
                     target=target, fractions=fractions, fill_id=fill_id, progress=progress)
    found.label = _label(model, tokenizer, decoder, found.output)
    found.meta = {"head": "decoder" if decoder else "classifier"}
    result.meta["faithfulness"] = found.to_dict()
    result.params["faithfulness"] = {"fractions": list(found.fractions), "deletion": found.deletion}
    return result


def faithfulness_report(result: Attribution) -> Faithfulness:
    """The ``Faithfulness`` a result carries (``meta["faithfulness"]``), e.g. after ``attnflow.load``."""
    data = result.meta.get("faithfulness") if isinstance(result.meta, dict) else None
    if data is None:
        raise AttnflowError("this result carries no faithfulness numbers; make it with attnflow.faithfulness")
    return Faithfulness.from_dict(data)
