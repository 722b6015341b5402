"""Entry point for `ray job submit`: runs `ada-ray train` inside the job's driver.

    ray job submit --address http://127.0.0.1:8265 --runtime-env jobs/runtime_env.yaml \
        -- python jobs/train_job.py conf/default.yaml trainer.total_steps=100

The driver joins the cluster through RAY_ADDRESS (set by the job supervisor); every actor inherits
the job's runtime_env (working dir, env vars). Exit code is the training's.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ada_ray.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
