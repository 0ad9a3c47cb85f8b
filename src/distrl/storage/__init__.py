"""Rollout storage and advantage estimators (pure tensor code)."""
