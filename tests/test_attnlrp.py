"""AttnLRP (attnflow.interventions.attnlrp) against oracles that do not share its code path:

- conservation, per family of the architecture table's ``lrp_gate`` column, in float64: the relevances
  sum to the explained logit minus the bias terms, each term computed here from its own definition by
  hooks of this test (linear biases b . g, LayerNorm offsets beta . g, position / token-type embeddings
  p . g, and per softmax row sum_k R_s_k (1 - x_k + sum_i s_i x_i) with R_s = s * g);
- on a model that is linear in its input embeddings, the relevances are gradient x input;
- one attention layer's rules (uniform on q.k and attention.V, the softmax rule, grouped-query heads)
  against a naive loop of the paper's formulas;
- the registry method through explain, generate and the CLI, and its refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import attnflow
from attnflow.hf.architectures import LRP_GATES
from attnflow.interventions.attnlrp import _attention, _Pass, attnlrp
from attnflow.errors import AttnflowError
from tests.cli_runner import run_cli
from tests.factory import saved, tiny_decoder, tiny_model

torch.set_num_threads(1)
VOCAB = 97


def _tiny(kind: str) -> torch.nn.Module:
    """The factory's tiny models plus Qwen2 (biased q/k/v) and Gemma 3 (q/k norms, hybrid windows)."""
    import transformers as T

    if kind in ("llama", "mistral", "gemma2", "gpt2", "bert"):
        model = tiny_model(kind, vocab=VOCAB)
    else:
        small = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     initializer_range=0.3)
        config_cls, model_cls, extra = {
            "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, {}),
            "gemma3_text": (T.Gemma3TextConfig, T.Gemma3ForCausalLM, dict(head_dim=8, sliding_window=4,
                                                                          sliding_window_pattern=2)),
        }[kind]
        torch.manual_seed(0)
        config = config_cls(**small, **extra)
        config._attn_implementation = "eager"
        model = model_cls(config).to(torch.float64).eval()
    # stock initialisation zeroes biases and sets norm weights to 1: random ones make every bias term bite
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower() or ".ln" in name or "LayerNorm" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3 + (name.endswith("weight")))
    return model


def _bias_terms(model):
    """Hooks computing each bias term from its definition; returns (terms dict, observe, reset). They are
    put on at the start of each forward pass and taken off at its end, so that they come after attnflow's
    (which its scope puts on when the call starts): the norm hooks below see the rule's output."""
    terms: dict[str, float] = {}
    constants: list[torch.Tensor] = []
    handles = []

    def add(key, t):
        terms[key] = terms.get(key, 0.0) + float(t.to(torch.float64).sum())

    def on_grad(key, value):
        def hook(module, args, output):
            output.register_hook(lambda g: add(key, value(module, output) * g))
        return hook

    inputs = model.get_input_embeddings()

    def put_on(*_):
        for module in model.modules():
            bias = getattr(module, "bias", None)
            if isinstance(module, torch.nn.LayerNorm) and bias is not None:
                handles.append(module.register_forward_hook(on_grad("norm offsets", lambda m, o: m.bias)))
            elif isinstance(bias, torch.Tensor) and type(module).__name__ in ("Linear", "Conv1D"):
                # before attnflow's halving hook (a gated factor): the gradient at the layer's own output
                handles.append(module.register_forward_hook(on_grad("linear biases", lambda m, o: m.bias),
                                                            prepend=True))
            elif isinstance(module, torch.nn.Embedding) and module is not inputs:
                handles.append(module.register_forward_hook(lambda m, a, o: constants.append(o.detach())))
        # position / token-type embeddings are added to the token embedding: the same gradient reaches them
        handles.append(inputs.register_forward_hook(lambda m, a, o: o.register_hook(
            lambda g: add("position embeddings", sum(constants) * g) if constants else None) and None))

    def take_off(*_):
        while handles:
            handles.pop().remove()

    model.register_forward_pre_hook(put_on)
    model.register_forward_hook(take_off)

    def observe(module, x, s):
        def hook(g):
            visible = s > 0  # masked keys: s = 0 exactly, x = the mask's most negative number
            xs = torch.where(visible, x, torch.zeros_like(x))
            sx = (s * xs).sum(-1, keepdim=True)
            add("softmax", torch.where(visible, s * g * (1 - xs + sx), torch.zeros_like(s)))
        s.register_hook(hook)

    def reset():
        terms.clear()
        constants.clear()
    return terms, observe, reset


KINDS = ["llama", "mistral", "qwen2", "gemma2", "gemma3_text", "gpt2", "bert"]


def test_every_family_with_lrp_rules_has_a_conservation_case():
    assert set(LRP_GATES) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_relevances_sum_to_the_logit_minus_the_bias_terms(kind):
    model = _tiny(kind)
    terms, observe, reset = _bias_terms(model)
    ids = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(1))
    targets = None if kind == "bert" else [4, 10]
    for foils in (None, [5, 7] if targets else [1]):
        reset()
        found = attnlrp(model, ids, targets, readout="logit" if foils is None else "contrastive", foils=foils,
                        observe=observe)
        assert found.relevance.shape == (len(targets or [0]), 11) and np.isfinite(found.relevance).all()
        lost = sum(terms.values())
        np.testing.assert_allclose(found.relevance.sum(), found.logits.sum() - lost, atol=1e-10)
        assert abs(terms["softmax"]) > 1e-3  # the rule's terms are not vanishing here: the check bites
        if kind in ("qwen2", "gpt2", "bert"):
            assert abs(terms["linear biases"]) > 1e-3
        if kind in ("gpt2", "bert"):
            assert abs(terms["norm offsets"]) > 1e-3 and abs(terms["position embeddings"]) > 1e-3
    if targets:  # causal: a target's relevances stop at its own position
        assert np.all(found.relevance[0, 5:] == 0)


@settings(max_examples=6, deadline=None)
@given(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=9))
def test_conservation_holds_for_any_input(ids):
    model = _LLAMA
    terms, observe, reset = _TERMS
    reset()
    found = attnlrp(model, ids, observe=observe)
    np.testing.assert_allclose(found.relevance.sum(), found.logits[0] - sum(terms.values()), atol=1e-10)


_LLAMA = _tiny("llama")
_TERMS = _bias_terms(_LLAMA)


def test_on_a_model_linear_in_its_embeddings_relevance_is_gradient_times_input():
    """GPT-2 with a linear activation, norms removed and the attention's projections zeroed (so its
    output is a constant): the logit is affine in the embeddings, every rule is the plain derivative
    there, and AttnLRP must equal gradient x input of the unmodified backward pass."""
    import transformers as T

    torch.manual_seed(0)
    config = T.GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2, n_positions=32,
                          activation_function="linear", initializer_range=0.3)
    config._attn_implementation = "eager"
    model = T.GPT2LMHeadModel(config).double().eval()
    with torch.no_grad():
        for block in model.transformer.h:
            block.ln_1, block.ln_2 = torch.nn.Identity(), torch.nn.Identity()
            block.attn.c_attn.weight.zero_()
            block.attn.c_attn.bias.normal_()
            block.mlp.c_fc.bias.normal_()
        model.transformer.ln_f = torch.nn.Identity()
    ids = torch.tensor([3, 14, 15, 9, 2, 6])
    found = attnlrp(model, ids, [2, 5])
    for i, t in enumerate([2, 5]):
        e = model.transformer.wte(ids[None]).detach().requires_grad_(True)
        z = model(inputs_embeds=e).logits[0, t, found.tokens[i]]
        (g,) = torch.autograd.grad(z, e)
        np.testing.assert_allclose(found.relevance[i], (e * g)[0].sum(-1).detach().numpy(), atol=1e-12)
        assert np.abs(found.relevance[i]).max() > 1e-3


def test_one_attention_layer_against_a_naive_loop_of_the_papers_rules():
    """Two query heads sharing one key/value head, causal mask, scaling 1/sqrt(d); the relevance at the
    output is out * g for a random upstream gradient g; the loop applies eq. (uniform rule on each
    product term, epsilon-rule with epsilon 0 over each sum) and the softmax rule R_x = x (R_s - s sum R_s)."""
    rng = np.random.default_rng(0)
    n, d, heads = 4, 3, 2
    q = torch.tensor(rng.normal(size=(1, heads, n, d)), requires_grad=True)
    k = torch.tensor(rng.normal(size=(1, 1, n, d)), requires_grad=True)
    v = torch.tensor(rng.normal(size=(1, 1, n, d)), requires_grad=True)
    g = torch.tensor(rng.normal(size=(1, n, heads, d)))
    mask = torch.triu(torch.full((n, n), torch.finfo(torch.float64).min, dtype=torch.float64), 1)[None, None]
    module = torch.nn.Module()
    module.num_key_value_groups, scale = heads, d ** -0.5
    out, _ = _attention(_Pass(None))(module, q, k, v, mask, scaling=scale)
    gq, gk, gv = torch.autograd.grad((out * g).sum(), (q, k, v))
    got = [(t * gt).detach().numpy()[0] for t, gt in ((q, gq), (k, gk), (v, gv))]

    Q, K, V, G = q.detach().numpy()[0], k.detach().numpy()[0, 0], v.detach().numpy()[0, 0], g.numpy()[0]
    Rq, Rk, Rv = np.zeros((heads, n, d)), np.zeros((n, d)), np.zeros((n, d))
    for h in range(heads):
        x = np.full((n, n), -np.inf)
        for i in range(n):
            for j in range(i + 1):
                x[i, j] = scale * sum(Q[h, i, c] * K[j, c] for c in range(d))
        s = np.exp(x - x.max(1, keepdims=True))
        s /= s.sum(1, keepdims=True)
        o = s @ V
        R_out = o * G[:, h, :]
        R_s = np.zeros((n, n))
        for i in range(n):
            for c in range(d):
                for j in range(i + 1):  # term s_ij v_jc of the sum o_ic: its share, half to each factor
                    share = s[i, j] * V[j, c] / o[i, c] * R_out[i, c]
                    R_s[i, j] += 0.5 * share
                    Rv[j, c] += 0.5 * share
        for i in range(n):
            total = R_s[i, :i + 1].sum()
            for j in range(i + 1):
                R_x = x[i, j] * (R_s[i, j] - s[i, j] * total)  # the softmax rule
                for c in range(d):  # x_ij = scale * sum_c q_ic k_jc: half of each term's share to each factor
                    share = scale * Q[h, i, c] * K[j, c] / x[i, j] * R_x
                    Rq[h, i, c] += 0.5 * share
                    Rk[j, c] += 0.5 * share
    np.testing.assert_allclose(got[0], Rq, atol=1e-12)
    np.testing.assert_allclose(got[1][0], Rk, atol=1e-12)
    np.testing.assert_allclose(got[2][0], Rv, atol=1e-12)


# --------------------------------------------------------------------------------- the long path
# From CHECKPOINT_FROM positions each layer is recomputed in the backward pass and its attention is
# recomputed chunk of query rows by chunk (_ChunkedAttention): the same relevances, no (heads, n, n).


def _small_chunks(monkeypatch, heads: int, n: int, rows: int = 3) -> None:
    """Chunks of ``rows`` query rows on a float64 model's ``n`` keys (several chunks per layer)."""
    from attnflow.interventions import attnlrp as module

    monkeypatch.setattr(module, "CHUNK_BYTES", rows * heads * n * 8, raising=False)


@pytest.mark.parametrize("kind", KINDS)
def test_the_long_path_gives_the_same_relevances_and_conserves(kind, monkeypatch):
    model = _tiny(kind)
    terms, observe, reset = _bias_terms(model)
    ids = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(1))
    targets = None if kind == "bert" else [4, 10]
    _small_chunks(monkeypatch, model.config.num_attention_heads, 11)
    for foils in (None, [5, 7] if targets else [1]):
        readout = "logit" if foils is None else "contrastive"
        plain = attnlrp(model, ids, targets, readout=readout, foils=foils, checkpoint=False)
        reset()  # observe sees each chunk's scores and weights during each backward pass
        long = attnlrp(model, ids, targets, readout=readout, foils=foils, observe=observe, checkpoint=True)
        np.testing.assert_allclose(long.relevance, plain.relevance, rtol=0, atol=1e-8)
        np.testing.assert_allclose(long.logits, plain.logits, rtol=0, atol=1e-12)
        assert long.tokens == plain.tokens and np.abs(plain.relevance).max() > 1e-2
        np.testing.assert_allclose(long.relevance.sum(), long.logits.sum() - sum(terms.values()), atol=1e-10)
        assert abs(terms["softmax"]) > 1e-3


class _Attention(TorchDispatchMode):
    """The shapes of the attention-like tensors ``(b, heads, rows, keys)`` any operation creates."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads, self.shapes = heads, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[1] == self.heads:
                self.shapes.add(tuple(t.shape))
        return out


def test_a_long_input_never_forms_a_layers_heads_square(monkeypatch):
    """The default call on a long input (CHECKPOINT_FROM lowered so that 13 tokens are long) creates
    no ``(heads, n, n)`` tensor at all, only chunks of query rows, so it holds less than one layer's at
    any time (today's path keeps every layer's for the backward pass); and it keeps only each layer's
    input through the forward pass (the layers are recomputed in the backward pass)."""
    from attnflow.interventions import attribution_patching as patching

    model, n = _LLAMA, 13  # no other axis of the tiny Llama is 13 long
    heads = model.config.num_attention_heads
    ids = torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(2))
    plain = attnlrp(model, ids, [6, n - 1])
    with _Attention(heads) as short:  # the check bites: below CHECKPOINT_FROM the pass forms them
        attnlrp(model, ids, [6, n - 1])
    assert (1, heads, n, n) in short.shapes
    monkeypatch.setattr(patching, "CHECKPOINT_FROM", 8)
    _small_chunks(monkeypatch, heads, n, rows=4)
    with _Attention(heads) as long:
        found = attnlrp(model, ids, [6, n - 1])
    head_dim = model.config.hidden_size // heads
    rows = {s[2] for s in long.shapes if s[3] == n and s[2] != head_dim}  # not the keys transposed (b, h, d, n)
    assert rows and max(rows) <= 4 and (1, heads, n, n) not in long.shapes, long.shapes
    np.testing.assert_allclose(found.relevance, plain.relevance, rtol=0, atol=1e-8)

    calls = []
    real = patching.checkpointed

    def spy(forward, args, kwargs):  # counts each run of a layer: in the forward pass and recomputed
        def counted(*a, **k):
            calls.append(1)
            return forward(*a, **k)
        return real(counted, args, kwargs)

    from attnflow.interventions import attnlrp as module

    monkeypatch.setattr(module, "checkpointed", spy)
    attnlrp(model, ids)
    assert len(calls) == 2 * model.config.num_hidden_layers  # the forward pass, then the backward's recomputation


def test_the_long_path_leaves_the_model_as_it_was_also_after_an_error(monkeypatch):
    from tests.test_model_unchanged import assert_unchanged, snapshot

    model = _tiny("gemma3_text")
    _small_chunks(monkeypatch, model.config.num_attention_heads, 11)
    before = snapshot(model)
    ids = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(1))
    attnlrp(model, ids, [4, 10], checkpoint=True)
    assert_unchanged(before, snapshot(model))

    def stop(done, total):
        if done == 2:  # after the first target's backward pass, inside the scope
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        attnlrp(model, ids, [4, 10], checkpoint=True, progress=stop)
    assert_unchanged(before, snapshot(model))
    from attnflow.hf.points import installed_on

    assert installed_on(model) == {}


# ------------------------------------------------------------------------------ through the front doors

TEXT = "the keys to the old wooden cabinet"


@pytest.fixture(scope="module")
def decoder(minilm_path):
    return tiny_decoder(minilm_path)


def test_explain_and_generate_give_the_capture_functions_rows(decoder, minilm_path):
    model, tokenizer = decoder
    ids = tokenizer(TEXT)["input_ids"]
    result = attnflow.explain(TEXT, model, tokenizer=tokenizer, method="attnlrp")
    L, n = result.n_layers, len(ids)
    np.testing.assert_allclose(result.scores["attnlrp"][-1, L - 1], attnlrp(model, ids).relevance[0], atol=1e-12)
    generated = attnflow.generate(model, tokenizer, TEXT, 2, method="attnlrp")
    every = generated.meta["prompt_ids"] + generated.meta["generated_ids"]
    m = generated.input_length
    for i in range(generated.n_targets):  # each generated token: one teacher-forced computation
        expected = attnlrp(model, every[:m + i], tokens=[every[m + i]]).relevance[0]
        np.testing.assert_allclose(generated.scores["attnlrp"][i, L - 1, :m + i], expected, atol=1e-10)
    bert = tiny_model("bert", vocab=tokenizer.vocab_size)
    result = attnflow.explain(TEXT, bert, tokenizer=tokenizer, method="attnlrp")
    np.testing.assert_allclose(result.scores["attnlrp"][0, -1], attnlrp(bert, ids).relevance[0], atol=1e-12)


def test_the_cli_explains_with_attnlrp(monkeypatch, capsys, tmp_path, decoder):
    model, tokenizer = decoder
    saved(model, tokenizer, tmp_path)
    js = tmp_path / "r.json"
    code, out, err = run_cli(monkeypatch, capsys, "explain", TEXT, "--model", str(tmp_path), "--method", "attnlrp",
                             "--json", str(js))
    assert code == 0, err
    result = attnflow.load(js)
    loaded, _ = attnflow.load_model(str(tmp_path))
    expected = attnlrp(loaded, tokenizer(TEXT)["input_ids"]).relevance[0]
    np.testing.assert_allclose(result.row("attnlrp")[-1], expected, atol=1e-6)


def test_refusals_say_why():
    import transformers as T

    config = T.OPTConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, ffn_dim=32, num_attention_heads=2,
                         word_embed_proj_dim=16)
    opt = T.OPTForCausalLM(config).eval()
    with pytest.raises(AttnflowError, match="AttnLRP's rules are checked .* 'opt' is not among them"):
        attnlrp(opt, [1, 2, 3])
    from attnflow.api.checks import check_methods, runnable

    with pytest.raises(AttnflowError, match="attnlrp runs on the families its rules are checked for .*'opt'"):
        check_methods(["attnlrp"], model=opt)  # up front, before any pass: what every entry point calls
    check_methods(["attnlrp"], model=_LLAMA)
    assert dict((m.name, r) for m, r in runnable(opt))["attnlrp"] is not None
    with pytest.raises(AttnflowError, match="readout must be one of logit, contrastive; got 'logprob'"):
        attnlrp(_LLAMA, [1, 2, 3], readout="logprob")
    assert _LLAMA.config._attn_implementation == "eager"  # the scoped switch put the model back


def test_spans_carry_the_sum_of_their_tokens_relevances(decoder):
    from attnflow.config.registry import Context, get

    model, tokenizer = decoder
    ids = tokenizer(TEXT)["input_ids"]
    n = len(ids)
    groups = [[0], [1, 2, 3], [4, 5], list(range(6, n))]
    context = Context(kind="text", attentions=None, settings=None, rows=[n - 1], model=model, input_ids=ids,
                      spans=groups)
    got = get("attnlrp")(context)[0, 0]
    tokens = attnlrp(model, ids).relevance[0]
    for g in groups:
        np.testing.assert_allclose(got[g], tokens[g].sum(), atol=1e-12)
