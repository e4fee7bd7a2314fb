"""Helpers for Skillhost skills written in Python (componentize-py).

A skill implements `class WitWorld(wit_world.WitWorld)` with `run` and
`manifest`. This module makes the usual parts short:

- `manifest(...)` builds the record `manifest` returns;
- `SkillFailure(code, message, retryable=False)` is raised to return a
  `skill-error`;
- `@skill_run` wraps `run` so that any other exception becomes a
  `skill-error` with code `internal` and the exception's text (it is also
  logged, with its traceback), instead of a trap that loses the message;
- `log` (`log.info("...")`) writes to the host's `log` capability.

The host builds skills with this directory on the Python path; nothing here
is needed at runtime outside a component.
"""

import functools
import inspect
import traceback

from componentize_py_types import Err
from wit_world.imports import types as _types
from wit_world.imports import log as _log


class SkillFailure(Exception):
    """Raise from `run` to return `skill-error {code, message, retryable}`."""

    def __init__(self, code, message, retryable=False):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable


def invalid_input(message):
    """The `invalid-input` error (not retryable)."""
    return SkillFailure("invalid-input", message)


def manifest(id, name, version, description, capabilities=("log",),
             max_attempts=1, initial_backoff_ms=0, estimated_duration_ms=1):
    """The record a skill's `manifest` returns. `capabilities` is what a
    scenario must grant; an interface the skill imports but does not declare
    here is denied in every call."""
    return _types.Manifest(
        id=id,
        name=name,
        version=version,
        description=description,
        capabilities=list(capabilities),
        retry=_types.RetryPolicy(
            max_attempts=max_attempts, initial_backoff_ms=initial_backoff_ms
        ),
        estimated_duration_ms=estimated_duration_ms,
    )


def skill_run(function):
    """Wraps `run`: `SkillFailure` becomes its `skill-error`; any other
    exception becomes `internal` with its message, and its traceback goes to
    the log. An `async def run` (a world whose `run` is an `async func`,
    WASI 0.3) is wrapped as a coroutine, the same way."""

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def run_async(self, input):
            try:
                return await function(self, input)
            except Err:
                raise
            except Exception as error:  # noqa: BLE001 - every failure must reach the step
                raise _as_err(error)

        return run_async

    @functools.wraps(function)
    def run(self, input):
        try:
            return function(self, input)
        except Err:
            raise
        except Exception as error:  # noqa: BLE001 - every failure must reach the step
            raise _as_err(error)

    return run


def _as_err(error):
    """The `Err` that `run` raises for `error`, which `run` raised: a
    `SkillFailure`'s own, else `internal` (its traceback logged)."""
    if isinstance(error, SkillFailure):
        return Err(_types.SkillError(
            code=error.code, message=error.message, retryable=error.retryable
        ))
    log.error(traceback.format_exc().rstrip())
    return Err(_types.SkillError(
        code="internal",
        message=f"{type(error).__name__}: {error}",
        retryable=False,
    ))


class _Log:
    """`log.info("...")` and friends, through the `log` capability."""

    def trace(self, message):
        _log.log(_log.Level.TRACE, str(message))

    def debug(self, message):
        _log.log(_log.Level.DEBUG, str(message))

    def info(self, message):
        _log.log(_log.Level.INFO, str(message))

    def warn(self, message):
        _log.log(_log.Level.WARN, str(message))

    def error(self, message):
        _log.log(_log.Level.ERROR, str(message))


log = _Log()
