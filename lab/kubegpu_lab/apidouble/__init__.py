"""A stateful Kubernetes API double served on loopback."""
