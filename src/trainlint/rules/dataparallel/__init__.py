"""DataParallel rules (TRL2xx)."""
