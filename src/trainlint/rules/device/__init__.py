"""Device placement rules (TRL1xx): tensors, models and devices that do not line up."""
