"""Generate the Python stubs of the ``multikafka.v1`` protos.

The ``.proto`` files live in ``proto/multikafka/v1``; they are compiled with
their package path (``multikafka/v1/admin.proto``) so that they never collide
with other descriptors in the same process (etcd clients register bare names
such as ``kv.proto``). The output lands in ``multikafka/v1`` together with
mypy-protobuf ``.pyi`` stubs.

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
PACKAGE_DIR = Path("multikafka") / "v1"
INIT = '"""Generated gRPC stubs of the multikafka.v1 protocol (see proto/generate.py)."""\n'


def generate(out_root: Path) -> Path:
    """Compile every proto into ``out_root/multikafka/v1`` and return that folder."""
    protos = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto")
    )
    out_dir = out_root / PACKAGE_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
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
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *protos,
    ]
    subprocess.run(cmd, check=True)
    (out_dir / "__init__.py").write_text(INIT)
    return out_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the stubs are current")
    args = parser.parse_args()
    target = ROOT / PACKAGE_DIR
    if not args.check:
        if target.exists():
            shutil.rmtree(target)
        generate(ROOT)
        print(f"generated {target.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        cmp = filecmp.dircmp(fresh, target, ignore=["__pycache__"])
        stale = cmp.left_only + cmp.right_only + cmp.diff_files
        if stale:
            print(f"stale generated stubs in {target.relative_to(ROOT)}: {sorted(stale)}")
            print("run: python proto/generate.py")
            return 1
    print("generated stubs are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
