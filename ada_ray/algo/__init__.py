"""Pure Reinforce-Ada algorithm code: no Ray, no model, deterministic given inputs and a seed.

Owns every rule of docs ALGORITHM.md: exit rules, per-prompt pools and first-collected balanced
downsampling, the pass-rate estimator and budget allocation, DAPO filtering, advantages, the
policy loss (torch only), staleness admission, and the work scheduler the PromptQueue actor wraps.
"""

from ada_ray.algo.types import Group, Sample  # noqa: F401
