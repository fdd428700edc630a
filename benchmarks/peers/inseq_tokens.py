"""Child process of benchmarks/decoder_study.py: inseq 0.7.1's value zeroing (Mohebbi et al., EACL 2023) on
the study's prompts, run with the inseq venv's Python (inseq 0.7.1 ``--no-deps``, transformers 4.53.3:
its value-zeroing hook expects the tuples decoder layers returned before transformers 5; torch 2.13.0
pinned)::

    /work/venvs/inseq/bin/python benchmarks/peers/inseq_tokens.py MODEL_DIR IN.json OUT.json [--max-tokens 64]

IN.json: a list of ``{"ids": [...], "output": id, "sources": [[positions], ...]}``; OUT.json: per item
``{"scores": [one per source], "cpu_s": ..., "wall_s": ...}`` (all three null for a prompt longer
than ``--max-tokens``, ``0`` meaning no limit; ``scores`` null for a prompt inseq cannot take as text).

inseq's own machinery, one step: ``inseq.load_model(model, "value_zeroing").attribute(prompt,
generated_texts=prompt + output)`` forces the explained token as the one generated token (constrained
decoding, no generation). Value zeroing is a final-step method: one forward pass per prompt position,
each zeroing that position's value vectors in every layer's self-attention (all heads) while every
block's output is patched back to the clean one, so each layer's effect is measured alone; per layer,
the score of source j for position i is the cosine distance between position i's clean and corrupted
block output, scores below 1e-5 set to 0, each row normalised to sum 1. inseq reads the row of the
position that predicts the output (the prompt's last token, n - 1) and returns ``(sources, 1, layers)``.
The reduction over layers is inseq's default: ``FeatureAttributionSequenceOutput.aggregate()`` takes
the mean over the layer dimension (``MultiDimensionalFeatureAttributionSequenceOutput``'s aggregator
``["mean"]``). The method does not read the output token (``use_predicted_target = False``): forcing it
only pins the attributed step.

What is adapted: the model is attnflow's float32 SmolLM2 copy, a transformers-5 folder, so the
tokenizer is built from ``tokenizer.json`` and ``rope_theta = 1e5`` is set by hand (4.53 does not read
the new rope format and would use 1e4); inseq takes text, so the prompt is the decoded ids, and a prompt
whose decode/encode round trip (with or without the output appended) does not give the study's ids back
is skipped (``scores`` null; counted in the log line; none of the 73 SmolLM2 prompts is), and so is a
prompt whose explained token is the EOS token (inseq drops it from the attributed steps; 1 of the 73); a source's score is the aggregated score of its positions (summed; the study's sources are single
tokens). Batch size 1.
"""

from __future__ import annotations

import json
import os
import sys
import time

try:
    import inseq
except ImportError as error:
    print(f"inseq_tokens.py: inseq is not installed in {sys.executable} ({error}); see benchmarks/decoder_study.py",
          file=sys.stderr)
    sys.exit(2)

import torch  # noqa: E402

torch.set_num_threads(1)

from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast  # noqa: E402


def load(path: str):
    config = AutoConfig.from_pretrained(path)
    config.rope_theta = 1e5  # transformers 4.53 does not read the rope parameters transformers 5 wrote
    model = AutoModelForCausalLM.from_pretrained(path, config=config, attn_implementation="eager",
                                                 torch_dtype=torch.float32).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(path, "tokenizer.json"))
    special = json.load(open(os.path.join(path, "tokenizer_config.json")))
    tokenizer.bos_token, tokenizer.eos_token = special.get("bos_token"), special.get("eos_token")
    tokenizer.pad_token = special.get("pad_token") or tokenizer.eos_token
    return model, tokenizer


def attribute(explainer, tokenizer, ids: list[int], output: int, sources: list[list[int]]) -> list[float] | None:
    prompt, full = tokenizer.decode(ids), tokenizer.decode(ids + [output])
    if (tokenizer(prompt, add_special_tokens=True)["input_ids"] != ids
            or tokenizer(full, add_special_tokens=True)["input_ids"] != ids + [output]):
        return None  # inseq would explain other tokens than the study's
    found = explainer.attribute(prompt, generated_texts=full, show_progress=False)
    seq = found.sequence_attributions[0]
    raw = seq.target_attributions  # (n + 1, 1, layers): rows = attributed positions, NaN at the output itself
    if raw.shape[1] == 0:
        return None  # the explained token is the EOS token, which inseq leaves out of the attributed steps
    assert raw.shape[0] == len(ids) + 1 and raw.shape[1] == 1, raw.shape
    scores = seq.aggregate().target_attributions[:len(ids), 0]  # inseq's default: mean over layers
    scores = torch.nan_to_num(scores.double())
    return [float(sum(scores[p] for p in s)) for s in sources]


def main() -> None:
    path, source, target = sys.argv[1], sys.argv[2], sys.argv[3]
    limit = int(sys.argv[sys.argv.index("--max-tokens") + 1]) if "--max-tokens" in sys.argv else 64
    model, tokenizer = load(path)
    explainer = inseq.load_model(model, "value_zeroing", tokenizer=tokenizer)
    out, unmatched, skipped = [], 0, 0
    items = json.loads(open(source).read())
    for k, item in enumerate(items):
        if limit and len(item["ids"]) > limit:
            out.append({"scores": None, "cpu_s": None, "wall_s": None})
            skipped += 1
            continue
        cpu, wall = time.process_time(), time.perf_counter()
        scores = attribute(explainer, tokenizer, item["ids"], item["output"], item["sources"])
        out.append({"scores": scores, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall})
        unmatched += scores is None
        print(f"\rinseq value zeroing {k + 1}/{len(items)}", end="", file=sys.stderr, flush=True)
    print(f"\ninseq value zeroing: {len(items) - skipped - unmatched} prompts, {unmatched} skipped (their text does "
          f"not encode back to the study's ids, or the output is EOS), {skipped} over {limit} tokens skipped", file=sys.stderr)
    with open(target, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
