"""Dashboard screens (detail view, help)."""
