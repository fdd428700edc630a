"""Interventions: edit a model's run and run it again, and what that costs. Knows transformers, never
results.

- :mod:`~attnflow.interventions.ablation` (ablated flow, occlusion: one source removed at a time),
  :mod:`~attnflow.interventions.span_ablation` (a span of sources at once),
  :mod:`~attnflow.interventions.attribution_patching` (the one-pass estimate),
  :mod:`~attnflow.interventions.budgeted` (exact where a stated budget allows, estimated elsewhere),
  :mod:`~attnflow.interventions.attnlrp` (AttnLRP), :mod:`~attnflow.interventions.logit_paths` (the
  pass that logit attribution reads: attention, values, residual and the direct path to the logit);
  :mod:`~attnflow.interventions.efficient_attention` (their passes on the model's own SDPA attention).
- The cost model: :mod:`~attnflow.interventions.compute` (a pass's multiply-accumulates, the budgeted
  chooser's unit), :mod:`~attnflow.interventions.costs` (time and memory before the work, the memory
  budget, refusals of what cannot fit).
"""
