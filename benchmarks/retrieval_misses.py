"""Why the sentence method misses a key sentence: on given prompts of ``benchmarks/long_retrieval.py``, the
key's first-order estimate and its rank, its exact effect beside the others' exact effects, and the largest
share of one head's attention the target gives each sentence.

    PYTHONPATH=src python benchmarks/retrieval_misses.py [--tokens 8192] [--threads 2] SEED:INDEX ...

For each prompt (``SEED:INDEX``: the INDEX-th prompt that ``long_retrieval.py --seed SEED`` draws at that
length), on SmolLM2-135M: the one-pass estimate summed per sentence (``attribution_patching`` with
``target_attention``: the same pass gives every head's attention row of the last position), the key's rank
among the document's sentences by it and by the attention share (``attnflow.interventions.budgeted.
attention_shares``: the first position left out), and the exact effect (``ablate_spans``: one run per
sentence) of the key, the distractors and the estimate's top five. Prints one block per prompt.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from long_retrieval import key_layout, load_smollm2, prompt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", help="SEED:INDEX")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import numpy as np

    from attnflow.interventions.attribution_patching import attribution_patching
    from attnflow.interventions.budgeted import attention_shares
    from attnflow.interventions.span_ablation import ablate_spans
    from attnflow.units.spans import groups_for

    model, tokenizer = load_smollm2(args.threads)
    print(f"load average {os.getloadavg()[0]:.2f}; SmolLM2-135M; {args.tokens} tokens", flush=True)
    for case in args.cases:
        seed, index = (int(x) for x in case.split(":"))
        rng = random.Random(seed + args.tokens)
        for _ in range(index + 1):  # the prompts long_retrieval.py draws before it
            text, key, _, distractors = prompt(rng, tokenizer, args.tokens)
        ids = tokenizer(text, return_tensors="pt").input_ids[0]
        n = ids.numel()
        spans, labels = groups_for("sentence", text, tokenizer, n)
        document, which, others = key_layout(labels, key, distractors)
        est = attribution_patching(model, ids, [n - 1], target_attention=True)
        estimate = np.array([est.scores[0, 0, s].sum() for s in spans[:document]])
        shares = attention_shares(est.target_attention, spans[:document])
        by_estimate, by_share = np.argsort(-estimate, kind="stable"), np.argsort(-shares, kind="stable")

        def rank(order, s):
            return int(np.where(order == s)[0][0]) + 1

        run = sorted({which, *others, *(int(s) for s in by_estimate[:5])})
        exact = ablate_spans(model, ids, [spans[s] for s in run], [n - 1]).scores[0, 0]
        print(f"== seed {seed} #{index}: {n} tokens, {document} sentences; key = sentence {which} (from position "
              f"{spans[which][0]})")
        print(f"  key: estimate {estimate[which]:+.2f} (rank {rank(by_estimate, which)}), exact "
              f"{exact[run.index(which)]:+.2f}, attention share {shares[which]:.2f} (rank {rank(by_share, which)})")
        for s, value in zip(run, exact):
            if s != which:
                kind = "distractor" if s in others else f"sentence {s}"
                print(f"  {kind:>12}: estimate {estimate[s]:+.2f} (rank {rank(by_estimate, s)}), exact {value:+.2f}, "
                      f"attention share {shares[s]:.2f} (rank {rank(by_share, s)})")
        print(flush=True)


if __name__ == "__main__":
    main()
