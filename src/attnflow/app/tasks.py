"""What a job runs: one api call each, on the shared model, with the job's progress and cancel.

Each is what a Python user would write in a few lines::

    result = attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=["raw", "rollout", "flow"])
    result = attnflow.generate(model, tokenizer, prompt, 8, streamer=streamer)
    result = attnflow.explain_image(image, model, method=["raw", "rollout", "flow"])
"""

from __future__ import annotations

import threading
from typing import Any

from attnflow.api import explain_image, explain_maps, generate
from attnflow.api.defaults import DECODER_METHODS
from attnflow.api.models import max_length
from attnflow.app.catalog import Loaded
from attnflow.app.jobs import Job
from attnflow.app.options import MAX_TEXT_TOKENS, GenerateRequest, ImageRequest, TextRequest
from attnflow.config import registry
from attnflow.errors import AttnflowError

# torch's sampling draws from one global random generator: two sampled generations at once would
# interleave their draws and neither would follow its seed, so seeded sampling takes turns.
_SAMPLING = threading.Lock()


def _waiting(job: Job) -> Any:
    return lambda: job.say("waiting for the model: another page is generating with it")


def explain_text(job: Job, loaded: Loaded, request: TextRequest) -> Any:
    n = len(loaded.tokenizer(request.text)["input_ids"])
    model_max = max_length(loaded.model, loaded.tokenizer)
    if model_max is not None and n > model_max:
        raise AttnflowError(f"the text is {n} tokens long; this model takes at most {model_max}")
    if n > MAX_TEXT_TOKENS:
        raise AttnflowError(f"the text is {n} tokens long; the app explains at most {MAX_TEXT_TOKENS} "
                            "(the Python API and `attnflow explain` take longer texts)")
    with loaded.lock.shared(job.check, _waiting(job)):
        slow = any(registry.get(m).cost == registry.MAX_FLOW for m in request.methods)
        job.say("explaining" + (" (attention flow: see the progress bar)" if slow else ""))

        def first_look(result: Any) -> None:  # flow for the explained target; the page shows it after a second
            job.show(result)
            job.say("computing flow for every other target (see the progress bar)")

        # the honest defaults and a short input's faithfulness numbers are the api's (attnflow.api.defaults)
        return explain_maps(request.text, loaded.model, tokenizer=loaded.tokenizer, methods=request.methods,
                            flow_targets="all" if request.flow_all else "auto", head_fusion=request.head_fusion,
                            residual=request.residual, progress=job.progress_callback("attention flow"),
                            paper_only=request.paper_only, preview=first_look, defaults=True,
                            **request.extra)


def _streamer(job: Job, tokenizer: Any, total: int) -> Any:
    """A ``model.generate`` streamer that hands each new token to the job as it is chosen, with the
    progress (tokens of ``total``), and stops generation, by raising, once the job is cancelled."""
    from transformers.generation.streamers import BaseStreamer

    from attnflow.api.models import token_strings

    progress = job.progress_callback("generation", unit="tokens")

    class TokenStream(BaseStreamer):
        prompt_seen = False
        count = 0

        def put(self, value: Any) -> None:
            if not self.prompt_seen:  # generate hands over the prompt first
                self.prompt_seen = True
                return
            for token in token_strings(tokenizer, value.reshape(-1).tolist()):
                job.add_token(token)
                self.count += 1
            progress(self.count, total)

        def end(self) -> None:
            pass

    return TokenStream()


def generate_text(job: Job, loaded: Loaded, request: GenerateRequest) -> Any:
    import torch

    sampling = dict(do_sample=True, temperature=request.temperature, top_k=request.top_k, top_p=request.top_p) \
        if request.sample else {"do_sample": False}
    turn = _SAMPLING if request.sample else threading.Lock()
    with loaded.lock.exclusive(job.check, _waiting(job)), turn:
        job.say("generating")
        if request.sample:
            torch.manual_seed(request.seed)
        # a decoder shows the paper's rollout beside the measured-faithful method (attnflow.api.defaults)
        methods = {} if getattr(loaded.model.config, "is_encoder_decoder", False) else {"method": list(DECODER_METHODS)}
        return generate(loaded.model, loaded.tokenizer, request.prompt, request.max_new_tokens,
                        residual=request.residual, head_fusion=request.head_fusion, causal_norm=request.causal_norm,
                        streamer=_streamer(job, loaded.tokenizer, request.max_new_tokens), **sampling,
                        **methods, **request.extra)


def explain_picture(job: Job, loaded: Loaded, request: ImageRequest) -> Any:
    with loaded.lock.shared(job.check, _waiting(job)):
        job.say("explaining the image")
        result = explain_image(request.image, loaded.model, method=request.methods, head_fusion=request.head_fusion,
                               residual=request.residual, progress=job.progress_callback("attention flow"),
                               **request.extra)
    result.input = request.name
    return result
