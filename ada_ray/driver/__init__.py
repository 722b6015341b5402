"""The driver: what `ada-ray train` runs in the job's process.

``trainer`` is the loop (a step: cohort from the queue -> learners train -> weights to the
samplers); ``runtime`` builds and tears down the actors; ``cluster`` connects to Ray and places
them; ``checkpoint`` saves and resumes; ``restarts`` decides which failures a run heals;
``output_paths`` where a run's files go; ``tracking`` MLflow; ``step_metrics``, ``progress`` and
``plots`` what a step reports.

Import rule (the whole package follows it): module-level imports, except Ray, vLLM, DeepSpeed
and MLflow, which are imported inside the function that needs them - so ``ada-ray --help``,
config validation and the fast tests never pay for (or depend on the import order of) them.
"""
