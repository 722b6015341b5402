"""Per-prompt pass-rate memory: the Est estimator (EMA counts with a Beta prior).

After a prompt gets n_t samples with k_t positives: N <- lambda*N + n_t, N_pos <- lambda*N_pos + k_t,
and p_hat = (N_pos + alpha) / (N + alpha + beta). Kept for every algorithm (difficulty memory for the
prompt queue), checkpointed with the queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PassRateEstimator:
    alpha: float = 1.0
    beta: float = 16.0
    lam: float = 0.9
    stats: dict[str, tuple[float, float]] = field(default_factory=dict)  # id -> (N, N_pos)

    def estimate(self, prompt_id: str) -> float:
        n, k = self.stats.get(prompt_id, (0.0, 0.0))
        return (k + self.alpha) / (n + self.alpha + self.beta)

    def seen(self, prompt_id: str) -> bool:
        return prompt_id in self.stats

    def update(self, prompt_id: str, num_samples: int, num_positive: int) -> float:
        if num_positive < 0 or num_positive > num_samples:
            raise ValueError(f"positives {num_positive} outside [0, {num_samples}] for prompt {prompt_id}")
        n, k = self.stats.get(prompt_id, (0.0, 0.0))
        self.stats[prompt_id] = (self.lam * n + num_samples, self.lam * k + num_positive)
        return self.estimate(prompt_id)

    def seed_prior(self, prompt_id: str, pass_rate: float, weight: float) -> None:
        """Seed the memory from an offline pass rate (e.g. prepare-data) worth `weight` samples."""
        if prompt_id not in self.stats:
            self.stats[prompt_id] = (float(weight), float(weight) * float(pass_rate))

    def state_dict(self) -> dict:
        return {"alpha": self.alpha, "beta": self.beta, "lam": self.lam,
                "stats": {k: list(v) for k, v in self.stats.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.alpha, self.beta, self.lam = state["alpha"], state["beta"], state["lam"]
        self.stats = {k: (float(v[0]), float(v[1])) for k, v in state["stats"].items()}
