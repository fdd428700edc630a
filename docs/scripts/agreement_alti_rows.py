"""Rows for Tables 1 and 2 from the decoder issue's logit attribution: ALTI-Logit and direct logit
attribution (DLA) of the CLS read-out, under the paper's protocol, on the same test examples.

    nice -n 10 python docs/scripts/agreement_alti_rows.py MODEL [MODEL ...] [--examples 500] [--json OUT]

Per example: ``logit_paths`` explains ``z_correct - z_wrong`` (the correct class against the other,
as blank-out scores p(correct)); ``direct_logit_attribution`` gives each token's share of layer
l's attention output on that logit difference, ``alti_logit`` the same with ALTI's mixing of the
earlier layers (Ferrando et al. 2023). The token score at layer l is the absolute value (blank-out
and the gradient score are absolute too). Blank-out and the gradient score are computed exactly as
``attnflow.reproduction.protocol`` does for the paper protocol, every token ranked with
``spearman_dense``. Ablated flow (value zeroing) is not given a row: it reuses a causal decoder's
key/value cache and refuses this bidirectional encoder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from attnflow.hf.load import quiet_transformers  # noqa: E402
from attnflow.interventions.logit_paths import logit_paths  # noqa: E402
from attnflow.core.logit_attribution import (  # noqa: E402
    alti_contributions,
    alti_logit,
    direct_logit_attribution,
)
from attnflow.evaluation.correlation import spearman_dense  # noqa: E402
from attnflow.evaluation.importance import (  # noqa: E402
    blank_out,
    embedding_gradients,
    reduce_gradient,
)
from attnflow.reproduction.run import held_out_examples, load  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    quiet_transformers()
    results = {}
    for name in args.models:
        cpu0, wall0 = time.process_time(), time.time()
        model, tokenizer, seed, path = load(name)
        rho = {}
        for example in held_out_examples(args.examples, seed):
            ids = tokenizer(example.text, return_tensors="pt").input_ids[0]
            n = len(ids)
            ends = [n - 1] if tokenizer.eos_token_id is not None and int(ids[-1]) == tokenizer.eos_token_id else []
            blanked = blank_out(model, ids, unk_id=tokenizer.unk_token_id, target=example.label,
                                positions=[i for i in range(n) if i not in ends])
            blanked[ends] = 0.0
            grad, _ = embedding_gradients(model, ids, at="word")
            importance = {"blank_out": blanked, "gradients": reduce_gradient(grad, "sum")}
            paths = logit_paths(model, ids, tokens=[example.label], foils=[1 - example.label])
            dla = direct_logit_attribution(paths.attentions, paths.values, paths.grads, paths.select)[0]
            alti = alti_logit(dla[None], alti_contributions(paths.attentions, paths.values, paths.w_o,
                                                            paths.residual))[0]
            for method, scores in (("alti_logit", alti), ("dla", dla)):
                scores = np.abs(scores.numpy())  # (L, n)
                for imp, values in importance.items():
                    rho.setdefault((method, imp), []).append([spearman_dense(row, values) for row in scores])
        out = {f"{m}|{imp}": {"mean": np.mean(v, 0).tolist(), "std": np.std(v, 0).tolist(), "n": len(v)}
               for (m, imp), v in rho.items()}
        results[str(name)] = out
        print(name, f"cpu {time.process_time() - cpu0:.0f} s, wall {time.time() - wall0:.0f} s, load {os.getloadavg()}")
        for key, cell in out.items():
            print(f"  {key:<24}" + " ".join(f"{m:6.2f}" for m in cell["mean"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
