"""Generation backends behind one small interface: add requests, step, collect finished
completions with behaviour log-probs, and load weights by name from the WeightBus."""
