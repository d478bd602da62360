"""Dashboard widgets."""
