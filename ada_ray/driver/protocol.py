"""`DriverRuntime`: the verbs the driver loop (driver/trainer.py) and the checkpoint code call on
the running system. `driver.runtime.Runtime` is the real one (Ray actors); tests/driver/fakes.py
has an in-process one, so the loop gets millisecond tests of its logic."""

from __future__ import annotations

from typing import Optional, Protocol, Union

from ada_ray.algo.scheduler import CohortResult
from ada_ray.algo.types import Signal


class DriverRuntime(Protocol):
    replaced: int  # samplers replaced so far (died, or failed a broadcast)

    def check_shared_dir(self, location: str) -> None:
        """Refuse to start when the driver cannot read what every learner writes to the run's storage
        `location` (a folder or a URI)."""

    def start_sampling(self) -> None:
        """Samplers start leasing work."""

    def wait_cohort(self, step: int, timeout_s: float) -> Union[CohortResult, Signal]:
        """The cohort trained at `step`; Signal.END when there is none, Signal.TIMEOUT after `timeout_s`."""

    def train(self, cohort: CohortResult, step: int) -> dict:
        """Every learner trains on its share; the merged learner metrics (without the `learner/` prefix).
        Raises algo.payloads.CohortPayloadsLost (and trains nothing) when payloads of the cohort are gone."""

    def return_cohort(self, cohort: CohortResult, owners: list[str]) -> int:
        """A cohort `train` could not fetch goes back to the queue; the prompts with a sample of `owners`
        are sampled again. Prompts restarted."""

    def sync_weights(self, version: int) -> dict:
        """New weights to every sampler as `version`; the queue learns the version. `sync/*` metrics."""

    def evaluate(self, prompts: list, k: int, temperature: float, seed: int, max_tokens: Optional[int] = None):
        """k samples per prompt: an ada_ray.evaluate result."""

    def sampler_stats(self) -> list[dict]:
        """Per sampler: busy_s, idle_s, update_s, tokens, samples, version (running totals)."""

    def queue_stats(self) -> dict:
        """The queue's busy_s and calls (running totals)."""

    def save_learners(self, directory: Optional[str], tag: str, hf_dir: str, tokenizer_from: str) -> None:
        """DeepSpeed state of every learner under `directory`/`tag` (none when None); the policy in HF
        format at `hf_dir`. Folders or storage URIs (ada_ray/storage.py)."""

    def load_learners(self, directory: str, tag: str) -> int:
        """Learner state back from a checkpoint (a folder or a URI); the policy version it held."""

    def queue_state(self) -> dict:
        """The PromptQueue's state (pools, estimator, cursor, accounting) as plain JSON."""

    def load_queue(self, state: dict) -> None:
        """The PromptQueue back to a saved state."""

    def shutdown(self) -> dict:
        """Stop every actor; the queue's final work accounting."""
