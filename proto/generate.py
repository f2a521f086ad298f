"""Generate the Python stubs of the ``multikafka.v1`` protos.

The ``.proto`` files live in ``proto/multikafka/v1``; they are compiled with
their package path (``multikafka/v1/admin.proto``) so that they never collide
with other descriptors in the same process (etcd clients register bare names
such as ``kv.proto``). The stubs are part of the bottom layer, so they land in
``multikafka_core/v1`` (with mypy-protobuf ``.pyi`` stubs); the one thing this
script changes in protoc's output is the Python module path it derives from
the proto path (``multikafka.v1`` -> ``multikafka_core.v1``): in the stubs'
imports of each other and in the module name the message classes carry
(pickling finds them by it). The wire names
(``/multikafka.v1.Admin/...``) come from the protos' ``package`` and stay.

    python proto/generate.py           # regenerate
    python proto/generate.py --check   # fail if the checked-in stubs are stale
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_DIR = Path("multikafka") / "v1"
PACKAGE_DIR = Path("multikafka_core") / "v1"
#: Module path protoc derives from the proto path, and the one the stubs live at.
PROTO_PACKAGE, PY_PACKAGE = "multikafka.v1", "multikafka_core.v1"
#: A module name protoc writes into the stubs (the messages' ``__module__``,
#: which pickling follows): ``"multikafka.v1.planner_pb2"``.
_MODULE_NAME = re.compile(r"(?P<q>[\"'])multikafka\.v1\.(?P<mod>\w+_pb2)(?P=q)")
INIT = '"""Generated gRPC stubs of the multikafka.v1 protocol (see proto/generate.py)."""\n'


def generate(out_root: Path) -> Path:
    """Compile every proto into ``out_root/multikafka_core/v1`` and return that folder."""
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
        out_dir = out_root / PACKAGE_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted((raw / PROTO_DIR).iterdir()):
            text = _MODULE_NAME.sub(rf"\g<q>{PY_PACKAGE}.\g<mod>\g<q>", path.read_text())
            text = text.replace(f"from {PROTO_PACKAGE} import", f"from {PY_PACKAGE} import")
            (out_dir / path.name).write_text(text)
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
