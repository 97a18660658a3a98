"""Rollout: repair episodes over public cases, and the hashed, append-only ledger they go into."""
