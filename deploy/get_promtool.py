#!/usr/bin/env python3
"""Put a ``promtool`` binary on this machine, from Debian's ``prometheus`` package (stdlib only).

``apt-get download prometheus`` fetches the package into a temporary
directory (no root needed, but the machine's apt lists must be there: after
``apt-get update``), ``dpkg-deb -x`` unpacks it, and only ``usr/bin/promtool``
is copied into ``--dest`` (default: the repository's ``.venv/bin``, or
``.venv/cache/promtool`` when there is no ``.venv/bin``); its path is printed.
The tests of the chart's alerting rules run ``promtool check rules`` with it.

Idempotent: when ``<dest>/promtool`` is already there it is not downloaded again.

Exit status: 0 with the path on stdout; 3 when promtool cannot be had here
(not a Debian-like machine with apt-get and dpkg-deb, or the download
failed); 1 when the package does not look as expected.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "prometheus"
PROMTOOL_IN_PACKAGE = Path("usr/bin/promtool")
#: Exit status when promtool cannot be had on this machine (callers may skip).
UNAVAILABLE = 3

REPO = Path(__file__).resolve().parents[1]


class Unavailable(Exception):
    """promtool cannot be had here: no apt/dpkg, or the download failed."""


def default_dest() -> Path:
    venv_bin = REPO / ".venv" / "bin"
    return venv_bin if venv_bin.is_dir() else REPO / ".venv" / "cache" / "promtool"


def _run(cmd: list[str], cwd: Path) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = [
            line
            for line in (result.stderr or result.stdout).strip().splitlines()
            if not line.startswith("W:")  # apt's warnings, e.g. the unsandboxed download
        ]
        raise Unavailable(f"{' '.join(cmd)} failed: {detail[-1] if detail else '?'}")


def download_deb(workdir: Path) -> Path:
    try:
        _run(["apt-get", "download", "--quiet", PACKAGE], workdir)
    except Unavailable as e:
        raise Unavailable(f"{e} (are the apt lists there? `sudo apt-get update`)") from e
    debs = sorted(workdir.glob(f"{PACKAGE}_*.deb"))
    if len(debs) != 1:
        raise RuntimeError(f"expected one {PACKAGE}_*.deb in {workdir}, found {debs}")
    return debs[0]


def extract_promtool(deb: Path, target: Path, workdir: Path) -> None:
    """deb -> usr/bin/promtool, written to ``target`` (atomically)."""
    root = workdir / "root"
    _run(["dpkg-deb", "-x", str(deb), str(root)], workdir)
    found = root / PROMTOOL_IN_PACKAGE
    if not found.is_file():
        raise RuntimeError(f"{PROMTOOL_IN_PACKAGE} not found in {deb.name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".promtool-", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, found.open("rb") as src:
            shutil.copyfileobj(src, out)
        tmp.chmod(0o755)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def get_promtool(dest: Path, *, deb: Path | None = None) -> Path:
    target = dest / "promtool"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    if platform.system() != "Linux" or (deb is None and shutil.which("apt-get") is None):
        raise Unavailable(
            f"no apt-get on this {platform.system()} machine: install promtool "
            f"(from a Prometheus release) into {dest} or onto PATH"
        )
    if shutil.which("dpkg-deb") is None:
        raise Unavailable(f"no dpkg-deb to unpack {PACKAGE}: install promtool into {dest}")
    with tempfile.TemporaryDirectory(prefix="get-promtool-") as tmp:
        work = Path(tmp)
        extract_promtool(deb or download_deb(work), target, work)
    version = subprocess.run(
        [str(target), "--version"], capture_output=True, text=True, check=False
    )
    if version.returncode != 0:
        target.unlink(missing_ok=True)
        raise RuntimeError(f"{target} does not run here: {version.stderr.strip()}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=None, help="directory to put promtool in")
    parser.add_argument("--deb", type=Path, default=None, help="use this downloaded .deb")
    args = parser.parse_args(argv)
    try:
        path = get_promtool(args.dest or default_dest(), deb=args.deb)
    except Unavailable as e:
        print(f"get_promtool: {e}", file=sys.stderr)
        return UNAVAILABLE
    except (RuntimeError, OSError) as e:
        print(f"get_promtool: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
