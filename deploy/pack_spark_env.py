#!/usr/bin/env python3
"""Pack the Python environment Spark's executors need to read with
multikafka, for ``spark-submit --archives <archive>#env`` (stdlib only;
``make spark-env`` runs it; docs/spark.md says how to submit with it).

    python deploy/pack_spark_env.py --wheels dist --out dist/multikafka-spark-env.tar.gz

It makes a virtual environment from this Python, installs
``multikafka-spark`` from the wheels in ``--wheels`` (``make dist``; their
dependencies from the package index), not editable, and packs it with
venv-pack (from PyPI, installed into a scratch folder for the run), which
rewrites the environment's scripts so it works unpacked anywhere.

What is left out, and why:

* **PySpark** (and pandas, py4j, which come with it): Spark puts its own
  ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j on its Python workers'
  ``PYTHONPATH``, and a worker's reading imports neither pandas nor
  anything else of PySpark's extras. ``multikafka-spark`` is installed with
  ``--no-deps``; what the read path imports comes with ``multikafka-reader``:
  pyarrow, confluent-kafka, grpcio, protobuf, numpy. ``--with-pyspark``
  installs everything ``multikafka-spark`` depends on instead (for
  comparison, or for a driver without a Spark install);
* pip, setuptools and wheel: nothing installs into an unpacked environment;
* pyarrow's C++ headers and the test suites of pyarrow and numpy.

The interpreter itself is not in the archive: ``env/bin/python`` is a
symbolic link to the base interpreter this script ran with (venv-pack
archives always are), so the machines that unpack it need that Python at
the same path (``--python-prefix`` points the link elsewhere, e.g.
``/usr``). To ship the interpreter too, pack a conda environment with
conda-pack, build a PEX, or make the environment from a
python-build-standalone interpreter.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: venv-pack, pinned: every machine packs the same way.
VENV_PACK = "venv-pack==0.2.0"
#: Inside the environment, removed before packing (see the module's doc).
PRUNED = (
    "bin/pip*",
    "bin/wheel",
    "lib/python3*/site-packages/pip",
    "lib/python3*/site-packages/pip-*",
    "lib/python3*/site-packages/setuptools",
    "lib/python3*/site-packages/setuptools-*",
    "lib/python3*/site-packages/pkg_resources",
    "lib/python3*/site-packages/_distutils_hack",
    "lib/python3*/site-packages/distutils-precedence.pth",
    "lib/python3*/site-packages/wheel",
    "lib/python3*/site-packages/wheel-*",
    "lib/python3*/site-packages/pyarrow/include",
    "lib/python3*/site-packages/pyarrow/tests",
    "lib/python3*/site-packages/numpy/*/tests",
    "lib/python3*/site-packages/numpy/tests",
)
#: What an executor's Python worker imports to read (checked after installing).
READ_PATH = "import pyspark_multikafka, multikafka.spark._source, multikafka.reader_agent"
ARCHIVE = "multikafka-spark-env.tar.gz"
#: pip without its notices (its warning about root: everything here installs
#: into scratch folders).
QUIET_PIP = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}


def _run(argv: list[str], **env: str) -> None:
    subprocess.run(
        argv,
        check=True,
        env={**os.environ, **QUIET_PIP, **env},
    )


def _version(wheels: Path) -> str:
    """The version of the ``multikafka-spark`` wheel in ``wheels``."""
    found = sorted(wheels.glob("multikafka_spark-*.whl"))
    if not found:
        raise SystemExit(f"no multikafka_spark wheel in {wheels}: run make dist first")
    return found[-1].name.split("-")[1]


def install(env: Path, wheels: Path, *, with_pyspark: bool) -> None:
    """A new virtual environment at ``env`` with the Spark side installed."""
    _run([sys.executable, "-m", "venv", str(env)])
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    pip += ["--find-links", str(wheels)]
    version = _version(wheels)
    if with_pyspark:
        _run([*pip, f"multikafka-spark=={version}"])
        return
    _run([*pip, f"multikafka-reader=={version}"])
    _run([*pip, "--no-deps", f"multikafka-spark=={version}"])


def prune(env: Path) -> None:
    for pattern in PRUNED:
        for path in env.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def check(env: Path) -> None:
    """The executors' imports work in ``env``, with PySpark from a Spark
    install as Spark's workers get it (when this Python has PySpark)."""
    spec = importlib.util.find_spec("pyspark")
    python = str(env / "bin" / "python")
    if spec is None or spec.origin is None:
        _run([python, "-c", "import multikafka.reader_agent"])
        return
    lib = Path(spec.origin).parent / "python" / "lib"
    path = os.pathsep.join(str(z) for z in sorted(lib.glob("*.zip")))
    _run([python, "-c", READ_PATH], PYTHONPATH=path)


def pack(env: Path, out: Path, scratch: Path, *, python_prefix: str, level: int) -> None:
    tools = scratch / "tools"
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(tools), VENV_PACK])
    argv = [sys.executable, "-m", "venv_pack", "--prefix", str(env), "--output", str(out)]
    argv += ["--force", "--quiet", "--compress-level", str(level)]
    if python_prefix:
        argv += ["--python-prefix", python_prefix]
    _run(argv, PYTHONPATH=str(tools))


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(f.lstat().st_size for f in path.rglob("*") if not f.is_dir())


def report(env: Path, out: Path) -> str:
    """The archive's size and its largest parts."""
    (site,) = env.glob("lib/python3*/site-packages")
    parts = sorted(((_size(p), p.name) for p in site.iterdir()), reverse=True)
    lines = [
        f"{out}: {out.stat().st_size / 1e6:.1f} MB packed, {_size(env) / 1e6:.1f} MB unpacked",
        *(f"  {size / 1e6:7.1f} MB  {name}" for size, name in parts[:10]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels", type=Path, default=Path("dist"), help="make dist's folder")
    parser.add_argument("--out", type=Path, help=f"the archive (default: <wheels>/{ARCHIVE})")
    parser.add_argument(
        "--with-pyspark", action="store_true", help="also PySpark and pandas (not needed)"
    )
    parser.add_argument(
        "--python-prefix", default="", help="where the base Python is on the executors' machines"
    )
    parser.add_argument("--compress-level", type=int, default=4, help="gzip level, 0-9")
    args = parser.parse_args(argv)
    out = (args.out or args.wheels / ARCHIVE).resolve()
    with tempfile.TemporaryDirectory(prefix="multikafka-spark-env-") as tmp:
        scratch = Path(tmp)
        env = scratch / "env"
        install(env, args.wheels.resolve(), with_pyspark=args.with_pyspark)
        prune(env)
        check(env)
        out.parent.mkdir(parents=True, exist_ok=True)
        pack(env, out, scratch, python_prefix=args.python_prefix, level=args.compress_level)
        out.chmod(0o644)  # venv-pack writes it 0600; Spark may fetch it as another user
        print(report(env, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
