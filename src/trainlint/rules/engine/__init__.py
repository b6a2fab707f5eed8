"""Engine-level findings (TRL0xx): reported by the engine itself, documented here."""
