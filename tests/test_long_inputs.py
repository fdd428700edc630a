"""Long inputs for the methods whose cost grows with the input (issue 33, item 3): an estimate before
the work, progress with an ETA on a non-terminal stderr, working memory under the stated budget, and
Ctrl-C obeyed within a second, with nothing half written.

The model is shaped like SmolLM2-135M where it matters for the cost (30 layers, 9 heads, 3 key/value
heads, float32, random weights) with a small hidden size. The input is ``TOKENS`` long, not the
issue's 2,048: on this machine (2 shared cores) capturing 2,048 tokens alone takes about a minute and
one edited sequence about 40 s, so the test would run for minutes; 512 tokens show the same code paths
(the estimate, the budget-chosen batch, the progress lines, the interrupt) in well under a minute.

Memory is read from ``/proc/PID/status`` of the CLI process: when the estimate is printed, the peak
(``VmHWM``) is reset to the resident size (``VmRSS``: the model, the captured maps and torch, which
the method does not own); the peak after some batches minus that size is the method's working memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TOKENS = 512
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status")


def _status(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` size field in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.fixture(scope="module")
def long_model(minilm_path, tmp_path_factory):
    """A saved SmolLM2-shaped Llama over MiniLM's vocabulary, and a text of exactly ``TOKENS`` tokens."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    tokenizer.model_max_length = 4096
    config = LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=72, intermediate_size=96,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         max_position_embeddings=4096)
    folder = tmp_path_factory.mktemp("smollm2-shaped")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    words = ("the keys to the old cabinet are on the table " * 200).split()
    text = " ".join(words[:TOKENS - 2])  # [CLS] ... [SEP]
    assert len(tokenizer(text)["input_ids"]) == TOKENS
    return str(folder), text


class _Cli:
    """The CLI in a subprocess, its stderr read line by line with the time each line came."""

    def __init__(self, args: list[str], cwd: Path, budget: str) -> None:
        env = {**os.environ, "ATTNFLOW_MEMORY_BUDGET": budget, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                              os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-m", "attnflow", *args], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[tuple[float, str]] = []
        self.peak = 0  # VmHWM, read every 50 ms while the process lives
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self.proc.poll() is None:
            try:
                self.peak = _status(self.proc.pid, "VmHWM")
            except (OSError, AssertionError):
                return
            time.sleep(0.05)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, text: str, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for _, line in self.lines:
                if text in line:
                    return line
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.02)
        self.proc.kill()
        raise AssertionError(f"no line with {text!r} in {timeout} s; stderr: {[line for _, line in self.lines]}")


def _reset_peak(pid: int) -> int:
    """Reset the process's peak (``VmHWM``) to its present resident size and return that size: what
    it held before (loading, capture, the timed passes) is no part of the method's peak."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status(pid, "VmRSS")


def _interrupt(cli: _Cli) -> float:
    """SIGINT now; seconds until the process has exited."""
    sent = time.monotonic()
    cli.proc.send_signal(signal.SIGINT)
    cli.proc.wait(timeout=30)
    return time.monotonic() - sent


def test_ablated_flow_estimates_shows_progress_stays_in_budget_and_stops_on_ctrl_c(long_model, tmp_path):
    folder, text = long_model
    budget = 128 * 2**20
    cli = _Cli(["explain", text, "--model", folder, "--method", "ablated-flow", "--json", "r.json"], tmp_path, "128M")
    estimate = cli.wait_for("ablated-flow on 512 tokens: about", 120)
    before = _reset_peak(cli.proc.pid)  # model, captured maps, torch: not the method's
    assert "Ctrl-C stops it" in estimate and "of a 128.0 MiB budget" in estimate, estimate
    batch = int(estimate.split("in batches of ")[1].split(";")[0])
    assert 1 <= batch < 16  # the budget, not the fixed 16, chose it
    first = cli.wait_for(f"ablated-flow: {batch}/{TOKENS} runs, ETA", 120)  # stderr is a pipe: plain lines
    peak = _status(cli.proc.pid, "VmHWM")
    assert peak - before < budget, (peak - before, budget)
    assert "ETA" in first
    took = _interrupt(cli)
    assert took < 1.0, took
    assert cli.proc.returncode == 130
    assert list(tmp_path.iterdir()) == []  # nothing half written


def test_alti_logit_states_its_memory_and_refuses_above_the_budget(long_model, tmp_path):
    """ALTI-Logit keeps every layer's ALTI contributions (layers x n x n, float32) and one layer's attention at a
    time: on 512 tokens of a 30-layer, 9-head model about 100 MiB, refused under a 64 MiB budget in one line that
    names the estimate, the budget and what to do; nothing is written. (Keeping every layer's attention in float64,
    it was about 3 GiB there.)"""
    folder, text = long_model
    cli = _Cli(["explain", text, "--model", folder, "--method", "alti-logit", "--json", "r.json"], tmp_path, "64M")
    cli.proc.wait(timeout=300)
    cli.reader.join(timeout=5)
    errors = [line for _, line in cli.lines if line.startswith("attnflow: error: ")]
    assert cli.proc.returncode == 2 and len(errors) == 1, cli.lines
    assert "alti-logit keeps every layer's ALTI contributions" in errors[0] and "MiB for 512 tokens" in errors[0]
    shown = float(errors[0].split("about ")[1].split(" MiB")[0])
    assert 64 < shown < 512  # over the budget, and far under the 3 GiB of every layer's float64 attention
    assert "64.0 MiB memory budget (ATTNFLOW_MEMORY_BUDGET)" in errors[0] and "shorter text" in errors[0]
    assert list(tmp_path.iterdir()) == []


def test_alti_logit_within_its_budget_estimates_shows_progress_and_stops_on_ctrl_c(long_model, tmp_path):
    folder, text = long_model
    budget = 512 * 2**20  # 512 tokens: the estimate says about 100 MiB (every layer's float64 attention: 2.9 GB)
    # a target before the last: a decoder's defaults (ablated flow beside it) are for the last position only
    cli = _Cli(["explain", text, "--model", folder, "--method", "alti-logit", "--target", str(TOKENS - 2),
                "--json", "r.json"], tmp_path, "512M")
    estimate = cli.wait_for("alti-logit on 512 tokens: about", 120)
    before = _reset_peak(cli.proc.pid)
    assert "one forward and one backward pass" in estimate and "of a 512.0 MiB budget" in estimate, estimate
    started = cli.wait_for("alti-logit: 0/2 runs, ETA ~", 60)  # counted down from the estimate
    assert "(estimated)" in started, started
    # let it finish: the peak of the whole method (sampled every 50 ms) against the budget
    cli.proc.wait(timeout=300)
    cli.reader.join(timeout=5)
    assert cli.proc.returncode == 0, cli.lines
    assert any("alti-logit: 2/2 runs" in line for _, line in cli.lines), cli.lines
    assert 0 < cli.peak - before < budget, (cli.peak - before, budget)
    assert (tmp_path / "r.json").is_file()


def _smollm2_shape(sdpa=False):
    """A stand-in with SmolLM2-135M's config (30 layers, 9 heads, 576 hidden, 1,536 inner): the memory
    model reads only the config (and falls back to float32 without parameters) and whether a long
    estimate pass can run its attention on SDPA (``sdpa``: as SmolLM2's Llama class can; False: a
    family that stays on eager attention, such as Gemma 2)."""
    from types import SimpleNamespace

    import transformers

    return SimpleNamespace(config=transformers.LlamaConfig(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        vocab_size=49152), _supports_sdpa=sdpa, set_attn_implementation=lambda name: None)


def test_backward_memory_follows_what_the_record_keeps_and_covers_what_was_measured():
    """Peaks measured on SmolLM2-135M above the loaded model (RSS; see
    :func:`attnflow.interventions.costs.backward_memory`): the estimate 1.06 GB at 512 tokens, 0.33 GB at
    1,024 checkpointed; AttnLRP 2.06 GB at 512 and 3.47 GB at 1,024. Each record's model covers its
    method's measured peak, and the estimate's is not the logit-path decomposition's (which refused it
    from about 800 tokens under the default 8 GiB budget)."""
    from attnflow.interventions.costs import backward_memory
    from attnflow.config import registry

    model = _smollm2_shape()
    keeps = {name: registry.get(name).keeps for name in ("ablated-flow-estimate", "attnlrp", "alti-logit",
                                                         "ablated-flow-budgeted")}
    assert keeps == {"ablated-flow-estimate": "checkpointed", "attnlrp": "chunked", "alti-logit": "alti scores",
                     "ablated-flow-budgeted": "checkpointed"}
    assert backward_memory("checkpointed", model, 512) >= 1.06e9
    assert backward_memory("checkpointed", model, 1024) >= 0.33e9
    assert backward_memory("autograd", model, 512) >= 2.06e9
    assert backward_memory("autograd", model, 1024) >= 3.47e9
    # from CHECKPOINT_FROM on, one layer at a time: far below keeping every layer
    assert backward_memory("checkpointed", model, 1024) < backward_memory("autograd", model, 1024) / 5
    assert backward_memory("checkpointed", model, 900) < 8 * 2**30 < backward_memory("decomposition", model, 900)
    # on SDPA (SmolLM2's own case): measured 2.19 GB at 8,192 tokens (benchmarks/long_one_pass.py), linear in n,
    # under the default 8 GiB budget where eager attention's one layer at a time is not
    sdpa = _smollm2_shape(sdpa=True)
    for n, measured in ((1024, 0.25e9), (2048, 0.62e9), (8192, 2.19e9)):
        assert backward_memory("checkpointed", sdpa, n) >= measured
    assert backward_memory("checkpointed", sdpa, 8192) < 8 * 2**30 < backward_memory("checkpointed", model, 8192)
    assert backward_memory("checkpointed", sdpa, 8192) == pytest.approx(2 * backward_memory("checkpointed", sdpa, 4096),
                                                                        rel=1e-6)


def test_attnlrp_long_path_memory_covers_what_was_measured_at_the_1b_shape():
    """AttnLRP at the Llama-3.2-1B shape in bfloat16 (``benchmarks/long_context.py --model llama-3.2-1b
    --dtype bfloat16 --steps "method attnlrp"``, peak RSS above the loaded model): 0.95 GB at 1,024 tokens
    and 1.03 GB at 2,048 on its long path, where the plain pass (every layer's attention kept) was modelled
    at 11 and 39 GB and refused; 0.96 GB at 256 on the plain pass. The model covers each, fits the default
    budget, and below CHECKPOINT_FROM is the plain pass's until that no longer fits the budget, where the
    long path runs instead (the call takes the same choice: ``long_path``)."""
    from types import SimpleNamespace

    import torch
    import transformers

    from attnflow.config import registry
    from attnflow.interventions.costs import backward_memory, long_path

    shape = transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                     num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256)
    model = SimpleNamespace(config=shape, parameters=lambda: iter([torch.zeros(1, dtype=torch.bfloat16)]))
    keeps, budget = registry.get("attnlrp").keeps, 8 * 2**30
    for n, measured in ((256, 0.96e9), (1024, 0.95e9), (2048, 1.03e9)):
        assert measured <= backward_memory(keeps, model, n, budget) < 2e9
    assert backward_memory("autograd", model, 2048) > 30e9
    assert not long_path(model, 256, budget) and long_path(model, 2048, budget)
    assert backward_memory(keeps, model, 256, budget) == backward_memory("autograd", model, 256)
    # 1,000 tokens: the plain pass would need more than the budget, so the long path runs there too
    assert backward_memory("autograd", model, 1000) > budget
    assert long_path(model, 1000, budget) and backward_memory(keeps, model, 1000, budget) < 2e9


def test_the_logit_paths_memory_model_covers_what_was_measured():
    """Peaks above the loaded model (RSS in a fresh process, ``benchmarks/long_context.py --steps "method NAME"``):
    Llama-3.2-1B's shape (random weights) in bfloat16 at 2,048 tokens, logit-attribution 1.73 GB and alti-logit
    1.90 GB; SmolLM2-135M in float32 at 512 tokens, 0.08 and 0.23 GB (2.76 and 2.83 GB when they kept every
    layer's attention in float64). The model covers each, and both fit the default 8 GiB budget at 2,048 tokens
    of the 1B shape, where every layer's float64 attention was modelled at 105 GB."""
    from types import SimpleNamespace

    import torch
    import transformers

    from attnflow.interventions.costs import backward_memory

    llama_1b = SimpleNamespace(config=transformers.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64), parameters=lambda: iter([torch.zeros(1, dtype=torch.bfloat16)]),
        forward=lambda input_ids=None, logits_to_keep=0: None)  # its logits: the targets' rows alone
    assert backward_memory("target rows", llama_1b, 2048) >= 1.73e9
    assert backward_memory("alti scores", llama_1b, 2048) >= 1.90e9
    assert backward_memory("alti scores", llama_1b, 2048) < 8 * 2**30 < backward_memory("decomposition", llama_1b, 2048)
    smollm2 = _smollm2_shape()
    assert backward_memory("target rows", smollm2, 512) >= 0.08e9
    assert backward_memory("alti scores", smollm2, 512) >= 0.23e9
    # more targets keep more rows; ALTI's scores grow as n^2 whatever the rows
    assert backward_memory("target rows", llama_1b, 2048, rows=64) > backward_memory("target rows", llama_1b, 2048)


def test_each_method_is_refused_by_its_own_memory_model(monkeypatch):
    import numpy as np

    from attnflow.interventions.costs import fit_to_budget as prepare
    from attnflow.config import registry
    from attnflow.config.registry import Context
    from attnflow.errors import AttnflowError

    monkeypatch.setenv("ATTNFLOW_MEMORY_BUDGET", "8G")
    model, ids = _smollm2_shape(), np.arange(900)

    def context(method):
        return Context(kind="text", attentions=None, settings=None, rows=[899], model=model, input_ids=ids)

    for name in ("ablated-flow-estimate", "ablated-flow-budgeted"):  # fits: nothing refused, nothing run
        assert prepare(registry.get(name), context(name)).model is model
    def long(model, n=8192):
        return Context(kind="text", attentions=None, settings=None, rows=[n - 1], model=model, input_ids=np.arange(n))

    # the logit paths keep the target's rows (and ALTI's (layers, n, n) float32 scores): 900 tokens fit, where
    # keeping every layer's (layers, heads, n, n) in float64 was refused; 8,192 do not (one layer's eager attention)
    for name in ("alti-logit", "logit-attribution"):
        assert prepare(registry.get(name), context(name)).model is model
    with pytest.raises(AttnflowError, match="alti-logit keeps every layer's ALTI contributions .* GiB for 8192 tokens"):
        prepare(registry.get("alti-logit"), long(model))
    with pytest.raises(AttnflowError, match="logit-attribution keeps the explained rows .* GiB for 8192 tokens"):
        prepare(registry.get("logit-attribution"), long(model))

    # a family on eager attention (Gemma 2's soft-cap): one layer's (heads, n, n) at a time, refused at 8,192
    with pytest.raises(AttnflowError, match=r"ablated-flow-estimate keeps a layer's attention .* at a time: about"):
        prepare(registry.get("ablated-flow-estimate"), long(model))
    # on SDPA (SmolLM2's Llama): linear in n, both fit at 8,192 under 8 GiB; the budgeted chooser's exact runs
    # (a prefix cache copy each) get the batch that fits, fewer than the 16 that fit at 2,048
    sdpa = _smollm2_shape(sdpa=True)
    assert prepare(registry.get("ablated-flow-estimate"), long(sdpa)).model is sdpa
    assert 1 <= prepare(registry.get("ablated-flow-budgeted"), long(sdpa)).batch_size \
        < prepare(registry.get("ablated-flow-budgeted"), long(sdpa, 2048)).batch_size == 16
    # the budgeted chooser's runs, 16 a batch: measured 1.59 GB at 1,024 tokens and 2.88 GB at 2,048
    from attnflow.interventions.costs import per_source_memory

    for n, measured in ((1024, 1.59e9), (2048, 2.88e9)):
        fixed, per = per_source_memory(sdpa, n, sdpa=True)
        assert fixed + 16 * per >= measured
    # and refused where they do not fit
    monkeypatch.setenv("ATTNFLOW_MEMORY_BUDGET", "1G")
    with pytest.raises(AttnflowError, match=r"ablated-flow-estimate keeps .* about .* GiB for 8192 tokens, over the "
                                            r"1.0 GiB"):
        prepare(registry.get("ablated-flow-estimate"), long(sdpa))
    with pytest.raises(AttnflowError, match=r"ablated-flow-budgeted .* 8192 tokens"):
        prepare(registry.get("ablated-flow-budgeted"), long(sdpa))


def test_a_method_over_the_budget_is_refused_before_the_capture_pass(minilm_path, monkeypatch):
    """The memory check needs only the config and the token ids, so a long input is refused before
    its capture (minutes and gigabytes at thousands of tokens), not after the other methods ran."""
    import attnflow
    import attnflow.api.text as text_api
    from attnflow.errors import AttnflowError
    from tests.factory import tiny_decoder

    model, tokenizer = tiny_decoder(minilm_path)
    import importlib

    rows_capture = importlib.import_module("attnflow.capture.rows")  # attnflow.capture is also the function

    captured = []
    real, real_rows = text_api.capture, rows_capture.capture_rows
    monkeypatch.setattr(text_api, "capture", lambda *a, **k: captured.append(1) or real(*a, **k))
    monkeypatch.setattr(rows_capture, "capture_rows", lambda *a, **k: captured.append(1) or real_rows(*a, **k))
    monkeypatch.setenv("ATTNFLOW_MEMORY_BUDGET", "1K")
    with pytest.raises(AttnflowError,
                       match=r"alti-logit keeps every layer's ALTI contributions.*1\.0 KiB memory budget"):
        attnflow.explain("the keys to the old cabinet are on the table", model, tokenizer=tokenizer,
                         method=["rollout", "alti-logit"])
    assert captured == []
    monkeypatch.setenv("ATTNFLOW_MEMORY_BUDGET", "8G")
    attnflow.explain("the keys to the old cabinet are on the table", model, tokenizer=tokenizer,
                     method=["rollout", "alti-logit"])
    assert captured == [1]


def test_a_decoder_default_over_the_budget_is_left_out_with_a_warning(minilm_path, monkeypatch):
    """The honest policy adds ablated flow (exact or budgeted) beside rollout when no method is named; when it
    cannot fit the budget rollout still runs, and the warning says which default was left
    out and why (before, the default's refusal came after the asked methods had run)."""
    import attnflow
    from attnflow.api.defaults import text_methods
    from tests.factory import tiny_decoder

    model, tokenizer = tiny_decoder(minilm_path)
    text = "the keys to the old cabinet are on the table"
    n = len(tokenizer(text)["input_ids"])
    _, added = text_methods(["rollout"], decoder=True, explains_last=True, n_tokens=n)
    assert added  # a decoder default is added on this input
    monkeypatch.setenv("ATTNFLOW_MEMORY_BUDGET", "1K")
    with pytest.warns(UserWarning, match=rf"the decoder default {added[0]} is left out: .*1\.0 KiB memory budget"):
        result = attnflow.explain(text, model, tokenizer=tokenizer)  # no method named: the decoder defaults
    assert "rollout" in result.methods and added[0] not in result.methods
