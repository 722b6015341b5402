"""The data cursor: which new prompt comes next, epoch by epoch.

Each epoch visits every prompt once, in an order fixed at the epoch's start:
sequential     a seeded shuffle of the dataset;
hardest_first  ascending pass-rate estimate (ties by the seeded shuffle);
weighted       weighted sampling without replacement, weight 1/sqrt(p_hat) (Est's implicit weight).
The cursor (epoch, position, this epoch's order) is part of the queue's checkpoint, so a resume
neither replays nor skips a prompt.
"""

from __future__ import annotations

import math
import random
from typing import Optional, Sequence

from ada_ray.algo.estimator import PassRateEstimator


class PromptOrder:
    def __init__(self, prompt_ids: Sequence[str], mode: str, seed: int, total_epochs: Optional[int] = None):
        if mode not in ("sequential", "hardest_first", "weighted"):
            raise ValueError(f"unknown prompt order {mode!r}: expected sequential, hardest_first or weighted")
        if len(prompt_ids) == 0:
            raise ValueError("the training set is empty: no prompts to schedule")
        if len(set(prompt_ids)) != len(prompt_ids):
            raise ValueError("duplicate prompt ids in the training set")
        self.ids = list(prompt_ids)
        self.mode = mode
        self.seed = seed
        self.total_epochs = total_epochs
        self.epoch = -1
        self.position = 0
        self.order: list[str] = []

    def _epoch_order(self, epoch: int, estimator: PassRateEstimator) -> list[str]:
        rng = random.Random(f"{self.seed}:{epoch}")
        ids = list(self.ids)
        rng.shuffle(ids)
        if self.mode == "hardest_first":
            ids.sort(key=lambda i: estimator.estimate(i))  # stable: ties keep the shuffle
        elif self.mode == "weighted":
            def key(i: str) -> float:
                w = 1.0 / math.sqrt(max(estimator.estimate(i), 1e-6))
                return math.log(max(rng.random(), 1e-300)) / w  # Efraimidis-Spirakis
            keys = {i: key(i) for i in ids}
            ids.sort(key=lambda i: -keys[i])
        return ids

    def exhausted(self) -> bool:
        return (self.total_epochs is not None and self.epoch >= self.total_epochs - 1
                and self.position >= len(self.order))

    def next(self, estimator: PassRateEstimator) -> Optional[tuple[str, int]]:
        """(prompt id, epoch) of the next prompt, or None when the data has run out."""
        if self.epoch < 0 or self.position >= len(self.order):
            if self.total_epochs is not None and self.epoch + 1 >= self.total_epochs:
                return None
            self.epoch += 1
            self.order = self._epoch_order(self.epoch, estimator)
            self.position = 0
        pid = self.order[self.position]
        self.position += 1
        return pid, self.epoch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "order": list(self.order)}

    def load_state_dict(self, state: dict) -> None:
        unknown = set(state["order"]) - set(self.ids)
        if unknown:
            raise ValueError(
                f"checkpointed data cursor names {len(unknown)} prompt ids not in this dataset "
                f"(e.g. {sorted(unknown)[0]}): the checkpoint was made with different data"
            )
        self.epoch, self.position, self.order = state["epoch"], state["position"], list(state["order"])
