"""Service test fixtures, shared with other test packages from tests.helpers.serving: one tiny checkpoint
exported to a real bundle per session, and an in-process app (lifespan running) driven by httpx."""

from tests.helpers.serving import assert_error, bundle_dir, serving, tiny_paths

__all__ = ["assert_error", "bundle_dir", "serving", "tiny_paths"]
