"""Training-loop rules (TRL4xx): losses, graphs, gradients and train/eval modes in a loop."""
