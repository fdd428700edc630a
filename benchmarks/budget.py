"""What ``ablated-flow-budgeted`` costs against the budget it states (issue 45), on SmolLM2-135M.

    PYTHONPATH=src nice -n 10 python benchmarks/budget.py [--tokens 200 2000] [--budgets 3 5 10 20] [--repeat 3]

One torch thread, one process. Per prompt length: one plain forward pass of the prompt (no gradients, the
last position's logits as a language model computes the next token's, on SDPA: the unit the budget counts, :mod:`attnflow.interventions.compute`; median of ``--repeat``) is the
baseline measured in the same run (the same pass on the model's own attention, eager as attnflow loads it, is
printed beside: about 2.2 times as long at 2,000 tokens); then, per budget ``B``, the CPU time of the whole call ``attnflow.explain(prompt, method="ablated-flow-budgeted",
settings=Settings(budget=B))`` (capture pass, estimate, exact re-runs; median of ``--repeat``) as a
multiple of that forward pass (measured again before each budget), beside the cost the method states in
``result.meta`` (in forward passes of the input) and ``B``; a budget the method refuses on this input (below
what it spends at least) is printed as refused. Printed: measured / stated and measured / B (the goal: within 10 % at 200 and at
2,000 tokens). CPU time (``time.process_time``) so that other processes on a shared machine count less;
run it on a quiet one anyway.

Prompts: the benchmark corpus's prose (``benchmarks/texts.py``), repeated to reach the length asked.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from texts import text  # noqa: E402

import attnflow  # noqa: E402
from attnflow.api.methods.one_pass import UNIT  # noqa: E402
from attnflow.api.models import resolve  # noqa: E402
from attnflow.interventions.efficient_attention import efficient_attention  # noqa: E402
from attnflow.errors import AttnflowError  # noqa: E402
from attnflow.hf.points import own_implementation  # noqa: E402


def prompt_of(tokenizer, n: int) -> str:
    """The corpus's prose, repeated and cut at a word so that it is about ``n`` tokens long."""
    words, base = [], text("prose").split()
    while len(tokenizer(" ".join(words))["input_ids"]) < n:
        words += base
    low, high = 1, len(words)  # the most words within n tokens
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if len(tokenizer(" ".join(words[:middle]))["input_ids"]) <= n else (low, middle - 1)
    return " ".join(words[:low])


def cpu_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        started = time.process_time()
        out = fn()
        times.append(time.process_time() - started)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--budgets", type=float, nargs="+", default=[3, 5, 10, 20])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bound = resolve(args.model, device="cpu")
    model, tokenizer = bound.model, bound.tokenizer
    print(f"model: {bound.name}; one torch thread; CPU time, median of {args.repeat}")
    print(f"{'tokens':>6}  {'B':>5}  {'measured':>9}  {'stated':>7}  {'measured/stated':>15}  {'measured/B':>10}  plan")
    for n in args.tokens:
        prompt = prompt_of(tokenizer, n)
        x = torch.tensor([tokenizer(prompt)["input_ids"]])
        with torch.no_grad():
            with efficient_attention(model, True) as kernel:  # the unit: a forward pass on SDPA
                forward, _ = cpu_time(lambda: model(input_ids=x, use_cache=False, logits_to_keep=1), args.repeat)
            eager, _ = cpu_time(lambda: model(input_ids=x, use_cache=False, logits_to_keep=1), args.repeat)
        print(f"{x.shape[1]} tokens: a forward pass {forward:.2f} s CPU on {'SDPA' if kernel.used else 'its own attention'}"
              f", {eager:.2f} s on the model's own ({own_implementation(model)}): {eager / forward:.2f}x", flush=True)
        for budget in args.budgets:
            if budget != args.budgets[0]:  # the unit again beside each call: a shared machine's load drifts
                with torch.no_grad(), efficient_attention(model, True):
                    forward, _ = cpu_time(lambda: model(input_ids=x, use_cache=False, logits_to_keep=1), args.repeat)
            settings = attnflow.Settings(budget=budget)
            try:
                seconds, result = cpu_time(lambda: attnflow.explain(prompt, bound, method="ablated-flow-budgeted",
                                                                    settings=settings), args.repeat)
            except AttnflowError as refused:  # a budget below what the method spends at least on this input
                print(f"{x.shape[1]:>6}  {budget:>5g}  refused: {refused}", flush=True)
                continue
            report = result.meta["ablated-flow-budgeted"]
            measured = seconds / forward
            print(f"{x.shape[1]:>6}  {budget:>5g}  {measured:>8.2f}x  {report['cost']:>7.2f}  "
                  f"{measured / report['cost']:>15.2f}  {measured / budget:>10.2f}  {report['plan']}", flush=True)
    print(f"(stated: result.meta['ablated-flow-budgeted']['cost'], in {UNIT})")


if __name__ == "__main__":
    main()
