"""driver/step_metrics.py: the waste metric (samples spent on prompts that ended with no signal)."""

from ada_ray.algo.scheduler import CohortResult
from ada_ray.algo.types import Group, Sample
from ada_ray.driver.step_metrics import cohort_metrics, no_signal_sample_share


def group(pid, rewards, advantages, pool):
    samples = [Sample(pid, [5], [-0.1], float(r), 0) for r in rewards]
    return Group(pid, [1], samples, advantages, 0, pool_size=pool, pool_positives=sum(rewards), rounds=2,
                 exit_fired=len(set(rewards)) > 1, round0_rewards=[float(r) for r in rewards])


def test_no_signal_share_counts_the_whole_pool_of_zero_advantage_groups():
    usable = group("a", [1, 1, 0, 0], [0.5, 0.5, -0.5, -0.5], pool=6)
    hopeless = group("b", [0, 0, 0, 0], [0.0] * 4, pool=12)  # 12 samples drawn, all wrong
    assert no_signal_sample_share([usable, hopeless]) == 12 / 18
    assert no_signal_sample_share([]) == 0.0
    m = cohort_metrics(CohortResult(0, [usable, hopeless], [], 2, False, 18, skipped=5), 0, 2)
    assert m["train/no_signal_sample_share"] == 12 / 18
    assert m["train/prompts_skipped"] == 5.0 and m["train/first_round_samples"] == 4.0
