"""Weight broadcast from learner rank 0 to every sampler, on a process group of its own."""
