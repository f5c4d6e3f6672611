"""What persists: the SQLite store (schema and migrations), the calibrated model parameters it keeps, and
the cluster (the scheduler rebuilt from the store)."""
