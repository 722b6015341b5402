"""`python -m ada_ray ...` is the same as the `ada-ray` console script."""

import sys

from ada_ray.cli import main

sys.exit(main())
