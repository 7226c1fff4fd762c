"""What runs inside one trial: the rank launcher, the DDP loop, LR rules, workloads and
measurements. Never imports ray: the same loop runs under Ray, under torchrun and in a test."""
