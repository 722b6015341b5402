import subprocess
import sys


def test_algo_imports_no_ray():
    """algo/ is pure: no Ray, no vLLM, and (type hints only) not the config module, OmegaConf or data/."""
    code = ("import sys, ada_ray.algo, ada_ray.algo.scheduler, ada_ray.algo.leases, ada_ray.algo.scheduler_state, "
            "ada_ray.algo.prompt_source, ada_ray.algo.queue_shards, "
            "ada_ray.algo.loss, ada_ray.algo.strategies, ada_ray.knob_defaults; "
            "bad = [m for m in sys.modules if m in ('ray', 'ada_ray.config', 'omegaconf') or m.startswith('ray.') "
            "or m.startswith('vllm') or m.startswith('ada_ray.data')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
