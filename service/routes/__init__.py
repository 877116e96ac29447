"""HTTP routes: thin adapters from request models to engine calls and back to JSON."""
