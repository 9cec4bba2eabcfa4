"""Simulated peers for the demo and end-to-end tests: real training, real submissions, real attacks."""
