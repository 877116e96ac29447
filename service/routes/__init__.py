"""HTTP routes: thin adapters from request models to core calls and back to JSON."""
