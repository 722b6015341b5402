"""The learner's work without Ray: ``core`` is the DeepSpeed training step (log-probs, the
policy loss over mini-batches, the non-finite guard, weight export); ``batching`` splits a
cohort's samples into the learners' shares. The Ray actor around it is ``actors/learner.py``."""
