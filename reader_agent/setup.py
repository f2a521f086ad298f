"""Build configuration beyond pyproject.toml: the optional compiled converter.

``multikafka.reader_agent._convert`` turns confluent-kafka messages into Arrow
buffers without per-record Python work (docs/benchmarks.md, "Read rate"). It
is optional: without a C compiler and the Python headers the build skips it
and :mod:`multikafka.reader_agent._arrow` converts in Python instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "multikafka.reader_agent._convert",
            sources=["src/multikafka/reader_agent/_convert.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
