"""Child process of benchmarks/decoder_study.py: AT2 0.0.1 (Cohen-Wang et al. 2025, "Learning to Attribute
with Attention") on the study's prompts, run with the peers venv's Python (context-cite and at2 from the
registry, torch 2.13.0 pinned, transformers 5.x like attnflow's own)::

    /work/venvs/peers/bin/python benchmarks/peers/at2_tokens.py MODEL_DIR IN.json OUT.json \\
        --train TRAIN.json --cache DIR [--masks 32] [--iterations 1000]

IN.json: a list of ``{"ids": [...], "output": id, "sources": [[positions], ...]}``; OUT.json: per item
``{"scores": [one per source], "cpu_s": ..., "wall_s": ...}`` (the same shapes as contextcite_tokens.py).
TRAIN.json: a list of ``{"ids": [...], "sources": [[positions], ...]}`` (training prompts, disjoint from the
study's; the output explained is the model's argmax after the prompt, computed here). The trained estimator
and AT2's feature store live under ``DIR`` (the lead passes ``.cache/at2/<hash of the training set and
settings>``): a rerun with the same training set skips training; ``DIR/training.json`` records its cost.

AT2's own machinery, on the study's units: ``at2.attribution.trainer.LinearScoreEstimatorTrainer`` draws
``--masks`` random keep-masks per training prompt (its ``create_masks``, keep probability 0.5, its default;
32 masks, its default), stores AT2's features (``AttentionFeatureExtractor``: the attention of the response's
query position to each source, per layer and head, summed over the source's tokens, times the +-1 mask) and
the response's logit-probability under each ablation, then fits ``LinearScoreEstimator`` (one weight per
head, no bias, L1-normalised at the end) with its negative-Pearson loss, Adam, cosine schedule and gradient
clipping (its defaults: 1000 iterations, learning rate 1e-3). Attribution is ``ScoreEstimationAttributor``
with that estimator: one forward pass for the hidden states, AT2's own attention recomputation per layer.

What is adapted (a subclass of ``at2.tasks.AttributionTask`` on token ids, ``TokenTask``):
- sources are the study's units (tokens, or contiguous spans of tokens) given as positions, not sentences
  of a context string; positions outside every source (the first and last prompt token) are always kept;
- an ablated source is *deleted* from the token ids (the study's deletion ground truth; AT2's trainer
  default masks it with the attention mask instead); the ablated prompts are run right-padded in batches
  of 16 and the logit of the last real position is read, which is exact under a causal mask;
- no chat template and no generation: the prompt is the model's raw input, and the "response" is the one
  token the model predicts after it (one target, ``split_target_by="token"``);
- on Gemma 3 under transformers 5, AT2's reads of the rotary embeddings are adapted to the one rotary
  module that takes the layer type (:func:`gemma3_rotary_for_at2`);
- the model type is passed from the config (``"llama"`` for SmolLM2, ``"gemma3"`` for Gemma 3; AT2 infers it from ``name_or_path``, which need not say it);
- the training batch is every training prompt (AT2's default of 512 needs at least 512 prompts);
- at2's ``nltk.download`` at import (no network here) is neutralised before the import; CPU, float32.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import torch

torch.set_num_threads(1)

try:
    import nltk

    nltk.download = lambda *args, **kwargs: True  # at2.utils calls it at import; no network here
    from at2.attribution.attributors import ScoreEstimationAttributor
    from at2.attribution.features import AttentionFeatureExtractor
    from at2.attribution.score_estimators import LinearScoreEstimator
    from at2.attribution.trainer import LinearScoreEstimatorTrainer
    from at2.tasks.base import AttributionTask, compute_logit_probs, create_masks
except ImportError as error:
    print(f"at2_tokens.py: cannot import at2 with {sys.executable} ({error}); install at2==0.0.1 in the peers venv",
          file=sys.stderr)
    sys.exit(2)

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

BATCH = 16


class TokenTask(AttributionTask):
    """An AT2 task on token ids: the prompt ``ids`` (n,), the response the one token ``output`` at position
    n of ``ids + [output]``, and the sources contiguous runs of prompt positions."""

    def __init__(self, model, tokenizer, ids: list[int], output: int, sources: list[list[int]]):
        super().__init__(model, tokenizer)
        for s in sources:
            if list(s) != list(range(min(s), max(s) + 1)):
                raise ValueError(f"AT2 sources are contiguous token ranges; got positions {s}")
        self.ids, self.output, self.sources_positions = list(ids), int(output), [list(s) for s in sources]

    @property
    def input_text(self):
        return self.tokenizer.decode(self.ids)

    def set_generation(self, generation):
        pass  # the response is fixed: the one predicted token

    def _get_source_token_ranges(self):
        return [(min(s), max(s) + 1) for s in self.sources_positions]

    @property
    def target_token_range(self):
        return len(self.ids), len(self.ids) + 1

    @property
    def hidden_states(self):
        # as AttributionTask.get_hidden_states: every layer's input over prompt + response, last position dropped
        if self._cache.get("hidden_states") is None:
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor([self.ids + [self.output]]), output_hidden_states=True)
            self._cache["hidden_states"] = [h[:, :-1] for h in out.hidden_states]
        return self._cache["hidden_states"]

    def get_masks_and_logit_probs(self, num_masks, alpha, batch_size, base_seed=0, ablation_method="remove",
                                  verbose=False):
        masks = create_masks(num_masks, self.num_sources, alpha, base_seed)
        prompts = []
        for mask in masks:
            dropped = {p for s, keep in zip(self.sources_positions, mask) if not keep for p in s}
            prompts.append([t for p, t in enumerate(self.ids) if p not in dropped])
        out = []
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start:start + batch_size]
            width = max(map(len, chunk))
            ids = torch.tensor([p + [0] * (width - len(p)) for p in chunk])
            attention = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in chunk])
            last = torch.tensor([len(p) - 1 for p in chunk])
            with torch.no_grad():
                h = self.model.model(input_ids=ids, attention_mask=attention).last_hidden_state
                logits = self.model.lm_head(h[torch.arange(len(chunk)), last])[:, None]
            out.append(compute_logit_probs(logits, torch.full((len(chunk), 1), self.output)))
        return masks, torch.cat(out).float().numpy()


def at2_model_type(model) -> str:
    """AT2's name for the architecture (it would guess from ``name_or_path``): the config's model type,
    Gemma 3's text-only model under the module name AT2 reads its helpers from."""
    kind = model.config.model_type
    return {"gemma3_text": "gemma3"}.get(kind, kind)


def gemma3_rotary_for_at2(model) -> None:
    """AT2 0.0.1 reads Gemma 3's rotary embeddings as transformers 4.x laid them out: a
    ``rotary_emb_local`` module for the sliding-window layers and ``rotary_emb(x, positions)`` for the
    global ones. Transformers 5 has one module that takes the layer type. Two thin adapters give AT2 the
    same (cos, sin) the model itself uses for each layer type; the model's own calls are unchanged."""
    if at2_model_type(model) != "gemma3" or hasattr(model.model, "rotary_emb_local"):
        return
    rotary = model.model.rotary_emb
    forward = rotary.forward
    rotary.forward = lambda x, positions, layer_type="full_attention": forward(x, positions, layer_type)
    model.model.rotary_emb_local = lambda x, positions: forward(x, positions, "sliding_attention")


def argmax_output(model, ids: list[int]) -> int:
    with torch.no_grad():
        return int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())


def train(model, tokenizer, items: list[dict], cache: Path, masks: int, iterations: int) -> LinearScoreEstimator:
    path = cache / "estimators" / "at2" / "score_estimator.pt"
    if path.exists():
        print(f"at2: trained estimator from {path}", file=sys.stderr)
        return LinearScoreEstimator.load(path)
    cpu, wall = time.process_time(), time.perf_counter()
    examples = [{"ids": it["ids"], "output": argmax_output(model, it["ids"]), "sources": it["sources"]} for it in items]
    layers, heads = len(model.model.layers), model.config.num_attention_heads
    trainer = LinearScoreEstimatorTrainer(
        cache, examples, model, tokenizer,
        lambda ex, m, t: TokenTask(m, t, ex["ids"], ex["output"], ex["sources"]),
        feature_extractor=AttentionFeatureExtractor(layers, heads, model_type=at2_model_type(model)),
        split_target_by="token", num_masks=masks)
    # the trainer's generate() step writes these two stores; here the generation is the fixed predicted token
    for name, data in (("generations", {i: "" for i in range(len(examples))}),
                       ("task_datas", {i: {"num_sources": len(ex["sources"]), "num_targets": 1}
                                       for i, ex in enumerate(examples)})):
        (cache / name).mkdir(parents=True, exist_ok=True)
        (cache / name / "0_of_1.json").write_text(json.dumps(data))
    with contextlib.redirect_stdout(sys.stderr):  # the trainer prints its progress; stdout is the lead's
        trainer.compute_features_and_outputs(batch_size=BATCH)
        ablation_cpu = time.process_time() - cpu
        estimator = trainer.train(num_iterations=iterations, learning_rate=1e-3, batch_size=min(512, len(examples)),
                                  device="cpu", print_every=250, save_name="at2")
    weights = estimator.linear.weight.detach().reshape(layers, heads)
    stats = {"prompts": len(examples), "masks_per_prompt": masks, "iterations": iterations,
             "tokens": [min(len(e["ids"]) for e in examples), max(len(e["ids"]) for e in examples),
                        sum(len(e["ids"]) for e in examples) / len(examples)],
             "ablation_cpu_s": ablation_cpu, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
             "weights_per_layer": weights.sum(1).tolist(), "negative_weights": int((weights < 0).sum())}
    (cache / "training.json").write_text(json.dumps(stats, indent=1))
    print(f"at2: trained on {len(examples)} prompts x {masks} ablations in {stats['cpu_s']:.0f} s CPU", file=sys.stderr)
    return estimator


def main() -> None:
    path, source, target = sys.argv[1], sys.argv[2], sys.argv[3]

    def option(name, default):
        return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

    if "--train" not in sys.argv or "--cache" not in sys.argv:
        print("at2_tokens.py: --train TRAIN.json and --cache DIR are required (AT2 learns its head weights)",
              file=sys.stderr)
        sys.exit(2)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gemma3_rotary_for_at2(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    cache = Path(option("--cache", None))
    estimator = train(model, tokenizer, json.loads(Path(option("--train", None)).read_text()), cache,
                      int(option("--masks", 32)), int(option("--iterations", 1000)))
    out = []
    items = json.loads(Path(source).read_text())
    for k, item in enumerate(items):
        cpu, wall = time.process_time(), time.perf_counter()
        task = TokenTask(model, tokenizer, item["ids"], item["output"], item["sources"])
        scores = ScoreEstimationAttributor(task, estimator).get_attribution_scores(token_start=0, token_end=1)
        out.append({"scores": [float(s) for s in scores], "cpu_s": time.process_time() - cpu,
                    "wall_s": time.perf_counter() - wall})
        print(f"\rat2 {k + 1}/{len(items)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    Path(target).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
