"""Logging for the CLI (the library never installs handlers), and the
loggers' names (:func:`logger_of`)."""

from __future__ import annotations

import logging

from multikafka.core import env

#: ``extra`` fields printed after the message when a record carries them.
CONTEXT_FIELDS = ("stream", "cluster", "generation", "kind", "split", "agent", "error", "address")


def logger_of(module: str) -> logging.Logger:
    """The logger of ``module`` (its ``__name__``), named by its public path:
    ``multikafka.reader_agent._agent`` logs as ``multikafka.reader_agent.agent``,
    so log lines and logging configuration stay the same whichever modules
    are internal."""
    return logging.getLogger(module.replace("._", "."))


class ContextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = [f"{k}={getattr(record, k)}" for k in CONTEXT_FIELDS if hasattr(record, k)]
        return f"{line} {' '.join(ctx)}" if ctx else line


def configure(level: str | None = None) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(ContextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or env.get(env.LOG_LEVEL, "INFO")).upper())
    for noisy in ("aetcd", "grpc", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
