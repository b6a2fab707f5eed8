"""DDP and distributed rules (TRL3xx)."""
