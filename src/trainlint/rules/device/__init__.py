"""Device placement rules (TRL1xx)."""
