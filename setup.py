"""Build configuration beyond pyproject.toml: the optional C decoder.

``multikafka_core._decode`` turns confluent-kafka messages into Arrow buffers
without per-record Python work (docs/benchmarks.md, "Read-path cost"). It is
optional: without a C compiler and the Python headers the build skips it and
``multikafka_core.arrow`` decodes in Python instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "multikafka_core._decode",
            sources=["multikafka_core/_decode.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
