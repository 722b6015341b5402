"""The Ray actors: PromptQueue, Sampler and Learner - thin shells around algo/, engines/, sync/
and the learner's DeepSpeed step."""
