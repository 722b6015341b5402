"""How each algorithm samples one prompt and turns its pool into a training group.

A strategy answers four questions for the scheduler: how many samples each prompt of a new
cohort gets in its first round, whether a prompt needs another round after a round completes
(and of what size), what the kept group and its advantages are at the end, and whether that group
is replaced by a fresh prompt (`should_replace`: DAPO's filter). `STRATEGIES` maps each
`algo.name` to its class; `PromptState` is a prompt in flight (prompt_state.py; its JSON form:
scheduler_state.py). Strategies read a pool through its rewards and counts; downsampling picks the pool
indices of the first few positives and negatives, and a group keeps a view of its samples
(PromptState.view): the queue builds no Sample from a reported SampleBlock, the process that unpickles
the group does.

grpo            one round of n; group-mean advantages (std-normalised by default)
dapo            like grpo; zero-signal groups are dropped and replaced (the scheduler caps draws)
ada_seq_pos     rounds of M until |pos| >= K_pos or R rounds; balanced downsample; pool baseline
ada_seq_balance rounds of M until |pos| >= K_pos and |neg| >= K_neg or R rounds; same
ada_est         one round of n_i ~ w(p_hat_i) (exact total over the cohort); all samples trained
ada_budget      Seq-balance's exit rule and downsampling, rounds sized from the prompt's posterior
                (budget.py): settle in one round, at most a top-up, hopeless prompts parked at the draw
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ada_ray.algo.advantages import est_advantages, group_advantages, is_zero_signal, pool_advantages
from ada_ray.algo import budget
from ada_ray.algo.allocation import allocate
from ada_ray.knob_defaults import effective_norm_adv_by_std
from ada_ray.algo.downsample import balanced_downsample, unfinished_downsample
from ada_ray.algo.estimator import PassRateEstimator
from ada_ray.algo.exit_rules import ExitRule, exit_rule_for
from ada_ray.algo.prompt_state import PoolView, PromptState
from ada_ray.algo.types import Group, Prompt, Sample

if TYPE_CHECKING:
    from ada_ray.config import AlgoConfig


class Strategy:
    def __init__(self, algo: AlgoConfig):
        self.name = algo.name
        self.algo = algo
        self.rule: ExitRule = exit_rule_for(algo)
        self.threshold = algo.positive_threshold

    def first_round_sizes(self, prompts: list[Prompt], estimator: PassRateEstimator) -> list[int]:
        return [self.algo.n] * len(prompts)

    def next_round_size(self, st: PromptState, estimator: PassRateEstimator) -> Optional[int]:
        return None

    def admits(self, prompt_id: str, estimator: PassRateEstimator, seed: int, cohort: int) -> bool:
        """False: the data cursor passes this prompt over for this cohort (ada_budget parks prompts
        whose posterior says no pair is within reach)."""
        return True

    def exit_fired(self, st: PromptState) -> bool:
        return True

    def finalize(self, st: PromptState) -> Group:
        raise NotImplementedError

    def should_replace(self, group: Group) -> bool:
        """True: the scheduler drops this finished group and draws a fresh prompt in its place
        (while the cohort's draw cap allows; at the cap the group is kept)."""
        return False

    def _group(self, st: PromptState, kept: list[Sample], adv: list[float], exit_fired: bool) -> Group:
        p = st.prompt
        return Group(p.prompt_id, list(p.token_ids), kept, [float(a) for a in adv], st.cohort, st.pool_size,
                     st.num_pos, st.rounds_done, exit_fired, list(st.round0_rewards), p.difficulty)


class GRPO(Strategy):
    def finalize(self, st: PromptState) -> Group:
        kept = st.pool  # every sample, a view: built only where read
        adv = group_advantages(list(st.rewards), effective_norm_adv_by_std(self.algo))
        return self._group(st, kept, adv, self.exit_fired(st))


class DAPO(GRPO):
    """GRPO with dynamic sampling: a group whose rewards are all equal is replaced."""

    def should_replace(self, group: Group) -> bool:
        samples = group.samples
        return is_zero_signal(samples.rewards if isinstance(samples, PoolView) else [s.reward for s in samples])


class AdaSeq(Strategy):
    """Reinforce-Ada-Seq (pos or balance): sequential rounds with an exit rule."""

    def first_round_sizes(self, prompts: list[Prompt], estimator: PassRateEstimator) -> list[int]:
        return [self.algo.samples_per_round] * len(prompts)

    def exit_fired(self, st: PromptState) -> bool:
        return self.rule.satisfied(st.num_pos, st.num_neg)

    def next_round_size(self, st: PromptState, estimator: PassRateEstimator) -> Optional[int]:
        if self.rule.done(st.num_pos, st.num_neg, st.rounds_done):
            return None
        return self.algo.samples_per_round

    def finalize(self, st: PromptState) -> Group:
        pos, neg = st.pos.indices, st.neg.indices  # downsampling picks pool indices: no Sample is built here
        fired = self.exit_fired(st)
        if fired:
            kept = st.view(balanced_downsample(pos, neg, self.algo.n))
        else:
            kept = st.view(unfinished_downsample(pos, neg, self.algo.n, self.rule.kind))
        adv = pool_advantages(kept.rewards, len(pos), st.pool_size,
                              norm_by_std=effective_norm_adv_by_std(self.algo),
                              inverse_p_weight=self.algo.inverse_p_weight)
        return self._group(st, kept, adv, fired)


class AdaBudget(AdaSeq):
    """Seq-balance whose rounds are sized from the prompt's pass-rate posterior (budget.py): a first
    round that settles it with probability >= settle_target, a top-up only while a pair is within
    reach of the cap, and prompts with no pair within reach parked at the draw (explore_floor), or, when
    mostly failed and probe_samples > 0, drawn with one probe round."""

    def _posterior(self, estimator: PassRateEstimator, prompt_id: str, pos: int, neg: int) -> tuple[float, float]:
        counts = estimator.stats.get(prompt_id, (0.0, 0.0))
        return budget.posterior(counts, pos, neg, tuple(self.algo.budget_prior))

    def _need(self, pos: int, neg: int) -> tuple[int, int, int]:
        return budget.needs(self.rule.k_pos, self.rule.k_neg, self.algo.n, pos, neg)

    def first_round_sizes(self, prompts: list[Prompt], estimator: PassRateEstimator) -> list[int]:
        a = self.algo
        out = []
        for p in prompts:
            if not estimator.seen(p.prompt_id):  # no history: the paper's round of M
                out.append(min(a.samples_per_round, a.budget_max_samples))
                continue
            post = self._posterior(estimator, p.prompt_id, 0, 0)
            if self._at_draw(post) == "probe":
                out.append(a.probe_samples)
                continue
            out.append(budget.round_size(*post, self._need(0, 0), a.n, a.budget_max_samples, a.settle_target))
        return out

    def _at_draw(self, post: tuple[float, float]) -> str:
        """What a seen prompt gets at the draw: "sized" (its rule, or one pair with `park_need = pair`,
        is within reach of the cap with probability >= park_below), else "probe" (mostly failed, with
        probe_samples > 0: one round of probe_samples), else "parked"."""
        a = self.algo
        need = self._need(0, 0)
        if a.park_need == "pair":
            need = budget.pair_need(need)
        if not budget.hopeless(*post, need, a.budget_max_samples, a.park_below):
            return "sized"
        return "probe" if a.probe_samples > 0 and budget.mostly_wrong(*post) else "parked"

    def next_round_size(self, st: PromptState, estimator: PassRateEstimator) -> Optional[int]:
        if self.rule.done(st.num_pos, st.num_neg, st.rounds_done):
            return None
        left = self.algo.budget_max_samples - st.pool_size
        post = self._posterior(estimator, st.prompt.prompt_id, st.num_pos, st.num_neg)
        need = self._need(st.num_pos, st.num_neg)
        if budget.hopeless(*post, need, left, self.algo.park_below):
            return None
        return budget.round_size(*post, need, 1, left, self.algo.settle_target)

    def admits(self, prompt_id: str, estimator: PassRateEstimator, seed: int, cohort: int) -> bool:
        if not estimator.seen(prompt_id):
            return True
        post = self._posterior(estimator, prompt_id, 0, 0)
        if self._at_draw(post) != "parked":
            return True
        return budget.explores(seed, prompt_id, cohort, self.algo.explore_floor)


class AdaEst(Strategy):
    """Reinforce-Ada-Est: budget n_i ~ w(p_hat_i) from the pass-rate memory; all samples train."""

    def first_round_sizes(self, prompts: list[Prompt], estimator: PassRateEstimator) -> list[int]:
        a = self.algo
        b = len(prompts)
        total = int(round(a.est_mean_samples * b))
        total = min(max(total, b * a.est_n_min), b * a.est_n_max)
        p_hats = [estimator.estimate(p.prompt_id) for p in prompts]
        return allocate(p_hats, total, a.est_n_min, a.est_n_max, a.est_weight)

    def finalize(self, st: PromptState) -> Group:
        kept = st.pool
        adv = est_advantages(list(st.rewards), st.num_pos, self.algo.est_residual_weight)
        return self._group(st, kept, adv, self.exit_fired(st))


STRATEGIES: dict[str, type[Strategy]] = {
    "grpo": GRPO,
    "dapo": DAPO,
    "ada_seq_pos": AdaSeq,
    "ada_seq_balance": AdaSeq,
    "ada_est": AdaEst,
    "ada_budget": AdaBudget,
}


def make_strategy(algo: AlgoConfig) -> Strategy:
    cls = STRATEGIES.get(algo.name)
    if cls is None:
        raise ValueError(f"unknown algo.name {algo.name!r}: expected one of {', '.join(STRATEGIES)}")
    return cls(algo)
