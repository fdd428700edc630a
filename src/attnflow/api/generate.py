"""generate(): complete a prompt and track attention rollout for every generated token (the paper's
"refined method" for generative LMs), as an ``Attribution`` of kind "generation".

    result = attnflow.generate(model, tokenizer, "The keys to the cabinet", max_new_tokens=5)
    result.M                  # (n_generated, m_prompt, layers)
    result.top(3, target=0)   # prompt tokens the first generated token draws on (mean over layers)
"""

from __future__ import annotations

from typing import Any

from attnflow.api.generation_methods import check, method_blocks, reuses_cache
from attnflow.api.checks import check_methods
from attnflow.api.defaults import added_note, generation_methods
from attnflow.api.models import ModelInfo, inspect, is_name, resolve
from attnflow.api.seq2seq import generate_seq2seq
from attnflow.api.text import refuse_seq2seq_settings
from attnflow.capture import track_generation
from attnflow.config.settings import UNSET, Settings
from attnflow.hf.kind import kind_name
from attnflow.results import Attribution, Block


@Settings.keywords
def generate(model: Any, tokenizer: Any = None, prompt: str = "", max_new_tokens: int = 20, *,
             residual: float = UNSET, head_fusion: str = UNSET, causal_norm: str | None = UNSET,
             weighting: str = UNSET, settings: Settings | None = None, method: Any = "rollout",
             progress: Any = None, device: str = UNSET, dtype: str = UNSET, **generate_kwargs: Any) -> Attribution:
    """Generate a completion of ``prompt`` and roll out attention for every generated token.

    Sources are the prompt tokens followed by the generated tokens (``input_length`` = the prompt's
    length ``m``); target ``i`` is generated token ``i``, explained by the rollout row of the position
    that predicted it (``m - 1 + i``). ``meta`` holds the completion and the generated token ids.

    Args:
        model: A loaded causal LM with its ``tokenizer``, or what ``attnflow.load_model`` takes (a
            folder, a ``pathlib.Path``, a ``.gguf`` file, ``"smollm2"``, a hub id; then tokenizer=None;
            loaded once and reused), or None for the installed decoder (SmolLM2). An encoder-decoder
            model (T5, BART, Marian, ...) generates from ``prompt`` as its source and gives a result
            of kind "seq2seq" (the joint rollout, see ``attnflow.api.seq2seq``).
        tokenizer: The tokenizer of a loaded ``model``.
        prompt: The text to complete.
        max_new_tokens: How many tokens to generate at most (generation may stop earlier at EOS).
        residual: Weight of the identity in ``A = (1 - residual) W + residual I``, as in
            [`rollout`][attnflow.core.rollout.rollout] (a setting).
        head_fusion: "mean", "max" or "min" over heads, as in
            [`rollout`][attnflow.core.rollout.rollout] (a setting).
        causal_norm: Receptive-field normalisation: None, "keys" or "sink", as in
            [`rollout`][attnflow.core.rollout.rollout] (a setting).
        weighting: "attention" (the paper's) or "norm" (attention times the length of each
            transformed value vector, Kobayashi et al. 2020; see
            [`explain`][attnflow.api.text.explain]) (a setting).
        settings: A [`Settings`][attnflow.config.settings.Settings]; the keywords above override it.
            Its target is unused: every generated token is explained.
        method: "rollout" (tracked while the model generates), or one or a list of the registered
            methods that run the model ("ablated-flow", "alti-logit", ...;
            ``attnflow.api.generation_methods``), computed beside rollout; the result opens on the
            first. None: the decoder defaults, rollout beside ablated flow (what ``attnflow generate``
            runs without ``--method``; ``attnflow.api.defaults.generation_methods``; ``meta["added"]``
            says so).
        progress: Called as ``progress(done, total)`` as the per-source methods run.
        device: Where a model given by name is loaded, as in [`explain`][attnflow.api.text.explain]
            (a setting).
        dtype: What a model given by name is loaded in, as in
            [`explain`][attnflow.api.text.explain] (a setting).
        **generate_kwargs: Passed to ``model.generate`` (``do_sample=True, top_k=50``, ...); seed
            with ``torch.manual_seed`` for reproducible sampling. ``strategy="rows"|"incremental"|
            "replay"`` picks how the rows are computed (default: the cheaper; see
            ``attnflow.capture.generation``).

    Returns:
        An [`Attribution`][attnflow.results.attribution.Attribution] of kind "generation" (or
            "seq2seq" for an encoder-decoder model).

    Raises:
        AttnflowError: A setting outside its allowed values, a model that cannot generate, or a
            method that does not run on a generation.

    Examples:
        Three tokens from the installed SmolLM2, greedily:

        >>> import attnflow
        >>> prompt = "The keys to the cabinet"
        >>> result = attnflow.generate("smollm2", prompt=prompt, max_new_tokens=3)
        >>> result.kind, result.targets[0], result.M.shape  # M: (new, prompt, layers)
        ('generation', ' are', (3, 5, 30))
        >>> [token for _, token, _ in result.top(2, target=0)]  # mean over layers
        ['The', ' cabinet']
    """
    settings = Settings.build(settings, residual=residual, head_fusion=head_fusion, causal_norm=causal_norm,
                              weighting=weighting, device=device, dtype=dtype)
    named = inspect(model, task="generation") if is_name(model) else model
    # the kind once: a named model's from its config before it loads, else the resolved model's
    known = not isinstance(named, ModelInfo) or named.model_kind.known
    loaded = None if known else resolve(named, tokenizer, task="generation", device=settings.device,
                                        dtype=settings.dtype)
    bound = named if known else loaded
    names, added = generation_methods(method, kind_name(bound), settings)
    check(names)
    check_methods(names, settings, bound, what="generate")
    loaded = loaded or resolve(named, tokenizer, task="generation", device=settings.device, dtype=settings.dtype)
    model, tokenizer, name = loaded.model, loaded.tokenizer, loaded.name
    if loaded.family == "encoder-decoder":
        refuse_seq2seq_settings(settings)
        return generate_seq2seq(model, tokenizer, prompt, max_new_tokens, settings=settings, **generate_kwargs)
    trace = track_generation(model, tokenizer, prompt, max_new_tokens, residual=settings.residual,
                             head_fusion=settings.head_fusion, causal_norm=settings.causal_norm,
                             weighting=settings.weighting, keep_cache=reuses_cache(names), **generate_kwargs)
    m = len(trace.prompt_ids)
    blocks = {"rollout": Block.full(trace.rows), **method_blocks(model, trace, names, trace.rows.shape[1], progress)}
    return Attribution(
        kind="generation", sources=trace.prompt_tokens + trace.generated_tokens, targets=trace.generated_tokens,
        target_positions=[m - 1 + i for i in range(len(trace.new_ids))], blocks=blocks,
        n_layers=trace.rows.shape[1], method=names[0], input=prompt, input_length=m, model=name,
        params={**settings.as_dict(), "do_sample": trace.do_sample, "max_new_tokens": max_new_tokens},
        meta={**({"added": added_note(added)} if added else {}),
              "completion": trace.completion, "generated_ids": trace.new_ids, "prompt_ids": trace.prompt_ids,
              "strategy": trace.strategy})
