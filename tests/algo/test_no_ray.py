import subprocess
import sys


def test_algo_imports_no_ray():
    code = ("import sys, ada_ray.algo, ada_ray.algo.scheduler, ada_ray.algo.loss, ada_ray.algo.strategies; "
            "bad = [m for m in sys.modules if m == 'ray' or m.startswith('ray.') or m.startswith('vllm')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
