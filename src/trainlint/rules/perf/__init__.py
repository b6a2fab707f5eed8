"""Performance rules (TRL5xx): info level, off by default (on with `--select TRL5` or `ALL`)."""
