"""``lint-imports`` (import-linter) over the ``multikafka`` package as the dev
environment installs it: ``make layers``.

import-linter's graph builder (grimp) finds a package's folders from its
import spec without importing it. In a dev install ``multikafka`` has a folder
per distribution (``core/src/multikafka``, ``coordinator/src/multikafka``, ...),
which the package's ``__init__`` joins into its path when it is imported;
importing it first gives grimp every folder. Installed from wheels, the
folders are one and this changes nothing.
"""

from __future__ import annotations

import sys

from importlinter.cli import lint_imports_command

import multikafka  # noqa: F401  (joins every distribution's folder into multikafka.__path__)

if __name__ == "__main__":
    sys.exit(lint_imports_command())
