"""Interventions: edit a model's run and run it again, and what that costs. Knows transformers, never
results.

- ``ablation`` (ablated flow, occlusion: one source removed at a time),
  ``span_ablation`` (a span of sources at once),
  ``attribution_patching`` (the one-pass estimate),
  ``budgeted`` (exact where a stated budget allows, estimated elsewhere),
  ``attnlrp`` (AttnLRP), ``logit_paths`` (the
  pass that logit attribution reads: attention, values, residual and the direct path to the logit);
  ``efficient_attention`` (their passes on the model's own SDPA attention).
- The cost model: ``compute`` (a pass's multiply-accumulates, the budgeted
  chooser's unit), ``costs`` (time and memory before the work, the memory
  budget, refusals of what cannot fit).
"""
