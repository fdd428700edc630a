"""Child process of benchmarks/decoder_peers.py, run with the inseq venv's Python (inseq 0.7.1,
transformers 4.53.3: its value_zeroing hook expects the tuples decoder layers returned before 5.x).

    /work/venvs/inseq/bin/python benchmarks/peers/inseq_value_zeroing.py MODEL_DIR PROMPT_IDS_JSON NEW

Loads SmolLM2 from attnflow's float32 copy (a transformers-5 folder: the tokenizer is built from
tokenizer.json and rope_theta = 1e5 is set by hand, as 4.53 does not read the new rope format),
decodes greedily NEW tokens with plain ``generate`` (the baseline in this interpreter), then runs
inseq's value_zeroing through the same generation. Prints one JSON line: CPU and wall seconds of
each, the generated ids (to check both runs and attnflow's decode the same tokens).
"""

import json
import os
import sys
import time

import torch

torch.set_num_threads(1)

from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast  # noqa: E402


def main() -> None:
    path, ids, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    config = AutoConfig.from_pretrained(path)
    config.rope_theta = 1e5
    model = AutoModelForCausalLM.from_pretrained(path, config=config, attn_implementation="eager").eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(path, "tokenizer.json"))
    special = json.load(open(os.path.join(path, "tokenizer_config.json")))
    tokenizer.bos_token, tokenizer.eos_token = special.get("bos_token"), special.get("eos_token")
    tokenizer.pad_token = special.get("pad_token") or tokenizer.eos_token
    x = torch.tensor([ids])
    args = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False}
    cpu, wall = time.process_time(), time.perf_counter()
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), pad_token_id=tokenizer.pad_token_id, **args)
    plain = (time.process_time() - cpu, time.perf_counter() - wall)
    import inseq

    explainer = inseq.load_model(model, "value_zeroing", tokenizer=tokenizer)
    text = tokenizer.decode(ids)
    if tokenizer(text, add_special_tokens=False)["input_ids"] != ids:
        raise SystemExit("the prompt does not survive decode/encode; pick another")
    cpu, wall = time.process_time(), time.perf_counter()
    found = explainer.attribute(text, generation_args=args, show_progress=False)
    attributed = (time.process_time() - cpu, time.perf_counter() - wall)
    target = [t.id for t in found.sequence_attributions[0].target][len(ids):]
    print(json.dumps({"plain_cpu": plain[0], "plain_wall": plain[1], "inseq_cpu": attributed[0],
                      "inseq_wall": attributed[1], "generated": out[0, len(ids):].tolist(),
                      "inseq_generated": target}))


if __name__ == "__main__":
    main()
