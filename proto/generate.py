"""Generate the Python stubs of the ``multikafka.v1`` protos.

The ``.proto`` files live in ``proto/multikafka/v1``; they are compiled with
their package path (``multikafka/v1/admin.proto``) so that they never collide
with other descriptors in the same process (etcd clients register bare names
such as ``kv.proto``). protoc derives the Python module from that path, and
that is where the stubs live: ``multikafka.v1`` (``core/src/multikafka/v1``,
in the core distribution, with mypy-protobuf ``.pyi`` stubs) — the same name
as the protos' package and the wire names (``/multikafka.v1.Admin/...``).
protoc's output is taken as it is.

    python proto/generate.py           # regenerate
    python proto/generate.py --check   # fail if the checked-in stubs are stale
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_DIR = Path("multikafka") / "v1"
#: The core distribution's source root: the stubs go to ``<it>/multikafka/v1``.
SOURCE_ROOT = ROOT / "core" / "src"
INIT = '"""Generated gRPC stubs of the multikafka.v1 protocol (see proto/generate.py)."""\n'


def generate(out_root: Path) -> Path:
    """Compile every proto into ``out_root/multikafka/v1`` and return that folder."""
    protos = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PROTO_DIR).glob("*.proto")
    )
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        # The mypy-protobuf plugins sit beside this interpreter (``.venv/bin``),
        # which need not be on PATH: name them explicitly.
        bindir = Path(sys.executable).parent
        plugins = [
            f"--plugin=protoc-gen-{name}={bindir / f'protoc-gen-{name}'}"
            for name in ("mypy", "mypy_grpc")
        ]
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            *plugins,
            f"--python_out={raw}",
            f"--grpc_python_out={raw}",
            f"--mypy_out={raw}",
            f"--mypy_grpc_out={raw}",
            *protos,
        ]
        subprocess.run(cmd, check=True)
        out_dir = out_root / PROTO_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted((raw / PROTO_DIR).iterdir()):
            shutil.copyfile(path, out_dir / path.name)
    (out_dir / "__init__.py").write_text(INIT)
    return out_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the stubs are current")
    args = parser.parse_args()
    target = SOURCE_ROOT / PROTO_DIR
    shown = target.relative_to(ROOT)
    if not args.check:
        if target.exists():
            shutil.rmtree(target)
        generate(SOURCE_ROOT)
        print(f"generated {shown}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        cmp = filecmp.dircmp(fresh, target, ignore=["__pycache__"])
        stale = cmp.left_only + cmp.right_only + cmp.diff_files
        if stale:
            print(f"stale generated stubs in {shown}: {sorted(stale)}")
            print("run: python proto/generate.py")
            return 1
    print("generated stubs are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
