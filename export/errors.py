"""The errors an export reports as one line (attnserve export, attnserve pull), never as a traceback: a bundle that
does not verify, a missing asset, a file or a disk, a value the export or the loader refuses, and, once the export
has run (torch is loaded then anyway), its own: a variant it cannot build, a graph that misses its parity gate."""

from __future__ import annotations

import sys


def export_errors() -> tuple[type[BaseException], ...]:
    from bundle.verify import BundleError
    from model.training.assets import AssetMissing

    errors: list[type[BaseException]] = [BundleError, AssetMissing, FileNotFoundError, ValueError, OSError]
    if "export.refusals" in sys.modules:  # imported by the export: torch is loaded anyway then
        from export.parity import ParityError
        from export.refusals import ExportError
        from export.variants import VariantError

        errors += [ExportError, ParityError, VariantError]
    return tuple(errors)
