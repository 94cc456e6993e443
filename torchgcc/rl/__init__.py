"""A small synchronous GRPO loop on CPU (tiny policy, verifiable digit task) for the SAGC experiment."""
