"""Personalised evaluation rounds, their scoring, and zero-shot onboarding after training."""
