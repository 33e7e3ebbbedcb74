"""aoscale package."""
