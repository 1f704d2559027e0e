"""The guarded tool: the client's side of docs/GUARD.md, "A guarded call, as a client runs it".

Every decision is the server's; this loop only calls the provider when told to
(``execute``, ``reconcile``) and reports what happened.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from ._errors import (
    DoneNotRecorded,
    IdemwatchError,
    InFlight,
    NeedsHumanReview,
    NotAttempted,
    OperationFailed,
    OutcomeUnknown,
    PayloadMismatch,
    Unavailable,
)
from ._types import (
    JSON,
    CallContext,
    Decision,
    ErrorClass,
    Intent,
    Outcome,
    _current,
    require_intent,
)

if TYPE_CHECKING:
    from ._client import AsyncClient, Client

Classify = Callable[[BaseException], "ErrorClass | str"]

_MAX_TEXT = 1000


def describe(exc: BaseException, timeout: float | None = None) -> str:
    """Why an outcome is unknown, as the server records it: ``timeout after 10 s``, ..."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or "Timeout" in type(exc).__name__:
        return f"timeout after {timeout:g} s" if timeout else "timeout"
    text = str(exc).strip()
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:_MAX_TEXT]


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text or type(exc).__name__)[:_MAX_TEXT]


def _classify(classify: Classify | None, exc: BaseException) -> ErrorClass:
    """Anything not known to be definitive is ambiguous: a timeout is never a failure."""
    if classify is None or not isinstance(exc, Exception):
        return ErrorClass.AMBIGUOUS
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return ErrorClass.AMBIGUOUS
    try:
        verdict = classify(exc)
    except Exception:  # a broken classifier must not turn an unknown into a failure
        return ErrorClass.AMBIGUOUS
    try:
        return ErrorClass(verdict)
    except ValueError:
        return ErrorClass.AMBIGUOUS


def backoff_delay(attempt: int, retry_after: float | None, base: float, cap: float) -> float:
    """Exponential backoff with jitter, never sooner than the server's ``retry_after``."""
    exp = min(cap, base * 2.0**attempt)
    return max(retry_after or 0.0, exp) + random.uniform(0, base / 2)


def _context(d: Decision) -> CallContext:
    timeout = d.policy.call_timeout_seconds if d.policy else 0.0
    return CallContext(
        key=d.key,
        fencing_token=int(d.fencing_token or 0),
        timeout=timeout,
        lease_until=d.lease_until,
        policy=d.policy,
    )


def _terminal(d: Decision) -> Outcome:
    """The decisions that end a call without the provider: replay, failed, unknown."""
    if d.decision == "replay":
        return Outcome(key=d.key, result=d.result, replayed=True)
    if d.decision == "failed":
        raise OperationFailed(
            f"key {d.key} failed: {d.error}", key=d.key, error=d.error or "", code="failed"
        )
    if d.decision == "unknown":
        raise OutcomeUnknown(
            f"outcome of key {d.key} is unknown ({d.reason})",
            key=d.key,
            reason=d.reason or "",
            code="unknown",
        )
    raise Unavailable(f"idemwatch answered a decision this client does not know: {d.decision!r}")


class _ToolBase:
    def __init__(
        self,
        name: str,
        *,
        classify: Classify | None,
        in_flight_retries: int,
        backoff_base: float,
        backoff_cap: float,
    ) -> None:
        if not name:
            raise ValueError("a guarded tool needs the name it has in the server's tools file")
        if in_flight_retries < 0:
            raise ValueError("in_flight_retries must be >= 0")
        self.name = name
        self.classify = classify
        self.in_flight_retries = in_flight_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap

    def _failed(self, d: Decision, exc: BaseException, error: str) -> OperationFailed:
        return OperationFailed(
            f"{self.name} failed definitively: {error}", key=d.key, error=error, code="failed"
        )

    @staticmethod
    def _not_attempted(exc: Unavailable) -> NotAttempted:
        """idemwatch could not admit the call: the provider was not called."""
        return NotAttempted(
            f"nothing was done: {exc.detail}",
            key=exc.key,
            code=exc.code,
            status=exc.status,
            retry_after=exc.retry_after,
            problem=exc.problem,
        )

    def _unrecorded(self, d: Decision, outcome: str, exc: Unavailable, kw: dict) -> OutcomeUnknown:
        """The outcome could not be recorded: the key stays claimed until its lease ends,
        and a retry reconciles with the provider. A success is still a success."""
        reason = f"could not record outcome {outcome!r}: {exc.detail}"
        if outcome == "done":
            return DoneNotRecorded(
                f"{self.name} key {d.key} acted but {reason}",
                key=d.key,
                reason=reason,
                code="unknown",
                result=kw.get("result"),
            )
        return self._unknown(d, reason)

    def _unknown(self, d: Decision, reason: str) -> OutcomeUnknown:
        return OutcomeUnknown(
            f"outcome of {self.name} key {d.key} is unknown ({reason})",
            key=d.key,
            reason=reason,
            code="unknown",
        )


class GuardedTool(_ToolBase):
    """A tool that acts at most once per intent. Build it with :meth:`Client.tool` or
    :meth:`Client.guard`; run it with :meth:`run`."""

    def __init__(
        self,
        client: Client,
        name: str,
        execute: Callable[[str, dict[str, JSON]], JSON],
        *,
        find_by_key: Callable[[str], JSON],
        classify: Classify | None = None,
        in_flight_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> None:
        super().__init__(
            name,
            classify=classify,
            in_flight_retries=in_flight_retries,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
        )
        if not callable(execute) or not callable(find_by_key):
            raise TypeError("execute(key, args) and find_by_key(key) must be callables")
        self.client = client
        self.execute = execute
        self.find_by_key = find_by_key

    def __call__(
        self, intent: Intent, args: Mapping[str, JSON], *, business_ref: str | None = None
    ) -> Outcome:
        return self.run(intent, args, business_ref=business_ref)

    def run(
        self, intent: Intent, args: Mapping[str, JSON], *, business_ref: str | None = None
    ) -> Outcome:
        """Runs the tool for ``intent`` at most once. Returns the :class:`Outcome` (fresh or
        replayed) or raises an :class:`IdemwatchError` that says what to do."""
        intent = require_intent(intent)
        if not isinstance(args, Mapping):
            raise TypeError("args must be a mapping (a JSON object)")
        attempt = 0
        while True:
            try:
                d = self.client.admit(self.name, intent, args, business_ref=business_ref)
                break
            except InFlight as exc:
                if attempt >= self.in_flight_retries:
                    raise
                self._await_holder(exc, attempt)
                attempt += 1
            except PayloadMismatch as exc:
                self._read_existing(exc)
                raise
            except Unavailable as exc:
                raise self._not_attempted(exc) from exc
        return self._drive(d)

    def _await_holder(self, exc: InFlight, attempt: int) -> None:
        """Waits for the worker holding the key to finish (the server's long poll wakes
        when the key is settled or taken over), instead of sleeping out its lease; falls
        back to the backoff when the key cannot be read."""
        delay = backoff_delay(attempt, exc.retry_after, self.backoff_base, self.backoff_cap)
        if exc.key:
            try:
                state = self.client.get_key(exc.key)
                if state.status == "IN_PROGRESS":
                    self.client.get_key(exc.key, after_token=state.fencing_token, wait=delay)
                return
            except IdemwatchError:
                pass
        time.sleep(delay)

    def _read_existing(self, exc: PayloadMismatch) -> None:
        """A natural-key refusal names the first action's key: read its state, so the
        model is told what exists (best effort: the refusal stands without it)."""
        if exc.intent_key and exc.key:
            try:
                exc.existing = self.client.get_key(exc.key)
            except IdemwatchError:
                pass

    def _drive(self, d: Decision) -> Outcome:
        while True:
            if d.decision == "execute":
                return self._execute(d)
            if d.decision == "reconcile":
                d = self._reconcile(d)
                continue
            return _terminal(d)

    def _execute(self, d: Decision) -> Outcome:
        ctx = _context(d)
        started = time.monotonic()
        reset = _current.set(ctx)
        try:
            result = _call_with_timeout(self.execute, ctx.timeout, d.key, dict(d.args or {}))
        except BaseException as exc:
            ms = _ms(started)
            if _classify(self.classify, exc) is ErrorClass.DEFINITIVE:
                error = _error_text(exc)
                self._settle(d, "failed", error=error, duration_ms=ms)
                raise self._failed(d, exc, error) from exc
            reason = describe(exc, ctx.timeout)
            if not isinstance(exc, Exception):
                reason = f"worker interrupted ({type(exc).__name__})"
            self._settle(d, "unknown", reason=reason, duration_ms=ms)
            if not isinstance(exc, Exception):
                raise
            raise self._unknown(d, reason) from exc
        finally:
            _current.reset(reset)
        self._settle(d, "done", result=result, duration_ms=_ms(started))
        return Outcome(key=d.key, result=result, replayed=False)

    def _settle(self, d: Decision, outcome: str, **kw: Any) -> None:
        try:
            self.client.settle(d.key, int(d.fencing_token or 0), outcome, **kw)
        except Unavailable as exc:
            raise self._unrecorded(d, outcome, exc, kw) from exc

    def _reconcile(self, d: Decision) -> Decision:
        token = int(d.fencing_token or 0)
        reset = _current.set(_context(d))
        started = time.monotonic()
        try:
            found = self.find_by_key(d.key)
        except Exception as exc:
            return self.client.reconcile(
                d.key, token, "failed", error=describe(exc), duration_ms=_ms(started)
            )
        finally:
            _current.reset(reset)
        try:
            if found is None:
                return self.client.reconcile(d.key, token, "not_found", duration_ms=_ms(started))
            return self.client.reconcile(
                d.key, token, "found", result=found, duration_ms=_ms(started)
            )
        except NeedsHumanReview as exc:
            exc.fencing_token = token
            raise

    def wait_for_person(self, error: NeedsHumanReview, timeout: float) -> Any:
        """Parks on the key of ``error`` until a person acts (see :meth:`Client.wait_for_person`)."""
        if error.key is None:
            raise ValueError("the error carries no key")
        return self.client.wait_for_person(error.key, timeout, after_token=error.fencing_token)


class AsyncGuardedTool(_ToolBase):
    """The asyncio twin of :class:`GuardedTool`. ``execute`` and ``find_by_key`` are
    coroutine functions; the tool's call timeout is enforced (a timeout is UNKNOWN)."""

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        execute: Callable[[str, dict[str, JSON]], Awaitable[JSON]],
        *,
        find_by_key: Callable[[str], Awaitable[JSON]],
        classify: Classify | None = None,
        in_flight_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> None:
        super().__init__(
            name,
            classify=classify,
            in_flight_retries=in_flight_retries,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
        )
        if not inspect.iscoroutinefunction(execute) or not inspect.iscoroutinefunction(
            find_by_key
        ):
            raise TypeError("AsyncClient tools need async def execute(key, args) and find_by_key(key)")
        self.client = client
        self.execute = execute
        self.find_by_key = find_by_key

    async def __call__(
        self, intent: Intent, args: Mapping[str, JSON], *, business_ref: str | None = None
    ) -> Outcome:
        return await self.run(intent, args, business_ref=business_ref)

    async def run(
        self, intent: Intent, args: Mapping[str, JSON], *, business_ref: str | None = None
    ) -> Outcome:
        intent = require_intent(intent)
        if not isinstance(args, Mapping):
            raise TypeError("args must be a mapping (a JSON object)")
        attempt = 0
        while True:
            try:
                d = await self.client.admit(self.name, intent, args, business_ref=business_ref)
                break
            except InFlight as exc:
                if attempt >= self.in_flight_retries:
                    raise
                await self._await_holder(exc, attempt)
                attempt += 1
            except PayloadMismatch as exc:
                if exc.intent_key and exc.key:
                    try:
                        exc.existing = await self.client.get_key(exc.key)
                    except IdemwatchError:
                        pass
                raise
            except Unavailable as exc:
                raise self._not_attempted(exc) from exc
        while True:
            if d.decision == "execute":
                return await self._execute(d)
            if d.decision == "reconcile":
                d = await self._reconcile(d)
                continue
            return _terminal(d)

    async def _await_holder(self, exc: InFlight, attempt: int) -> None:
        """The asyncio twin of :meth:`GuardedTool._await_holder`."""
        delay = backoff_delay(attempt, exc.retry_after, self.backoff_base, self.backoff_cap)
        if exc.key:
            try:
                state = await self.client.get_key(exc.key)
                if state.status == "IN_PROGRESS":
                    await self.client.get_key(exc.key, after_token=state.fencing_token, wait=delay)
                return
            except IdemwatchError:
                pass
        await asyncio.sleep(delay)

    async def _execute(self, d: Decision) -> Outcome:
        ctx = _context(d)
        started = time.monotonic()
        reset = _current.set(ctx)
        try:
            coro = self.execute(d.key, dict(d.args or {}))
            if ctx.timeout > 0:
                result = await asyncio.wait_for(coro, ctx.timeout)
            else:
                result = await coro
        except BaseException as exc:
            ms = _ms(started)
            if _classify(self.classify, exc) is ErrorClass.DEFINITIVE:
                error = _error_text(exc)
                await self._settle(d, "failed", error=error, duration_ms=ms)
                raise self._failed(d, exc, error) from exc
            reason = describe(exc, ctx.timeout)
            if not isinstance(exc, Exception):
                reason = f"worker interrupted ({type(exc).__name__})"
                await asyncio.shield(self._settle(d, "unknown", reason=reason, duration_ms=ms))
                raise
            await self._settle(d, "unknown", reason=reason, duration_ms=ms)
            raise self._unknown(d, reason) from exc
        finally:
            _current.reset(reset)
        await self._settle(d, "done", result=result, duration_ms=_ms(started))
        return Outcome(key=d.key, result=result, replayed=False)

    async def _settle(self, d: Decision, outcome: str, **kw: Any) -> None:
        try:
            await self.client.settle(d.key, int(d.fencing_token or 0), outcome, **kw)
        except Unavailable as exc:
            raise self._unrecorded(d, outcome, exc, kw) from exc

    async def _reconcile(self, d: Decision) -> Decision:
        token = int(d.fencing_token or 0)
        ctx = _context(d)
        reset = _current.set(ctx)
        started = time.monotonic()
        try:
            lookup = self.find_by_key(d.key)
            found = await (asyncio.wait_for(lookup, ctx.timeout) if ctx.timeout > 0 else lookup)
        except Exception as exc:
            return await self.client.reconcile(
                d.key, token, "failed", error=describe(exc, ctx.timeout), duration_ms=_ms(started)
            )
        finally:
            _current.reset(reset)
        try:
            if found is None:
                return await self.client.reconcile(
                    d.key, token, "not_found", duration_ms=_ms(started)
                )
            return await self.client.reconcile(
                d.key, token, "found", result=found, duration_ms=_ms(started)
            )
        except NeedsHumanReview as exc:
            exc.fencing_token = token
            raise

    async def wait_for_person(self, error: NeedsHumanReview, timeout: float) -> Any:
        if error.key is None:
            raise ValueError("the error carries no key")
        return await self.client.wait_for_person(
            error.key, timeout, after_token=error.fencing_token
        )


def _call_with_timeout(fn: Callable[..., Any], timeout: float, *args: Any) -> Any:
    """``fn(*args)`` under the tool's call timeout: past it, a ``TimeoutError`` (an
    ambiguous outcome). Python cannot stop a thread, so a call that overruns finishes in
    the background and its answer is dropped: the key is UNKNOWN and the next run of the
    intent looks the effect up at the provider."""
    if not timeout or timeout <= 0:
        return fn(*args)
    ctx = contextvars.copy_context()
    box: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def target() -> None:
        try:
            box.set_result(ctx.run(fn, *args))
        except BaseException as exc:  # carried to the caller's thread
            box.set_exception(exc)

    threading.Thread(target=target, name="idemwatch-call", daemon=True).start()
    try:
        return box.result(timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"the call took longer than {timeout:g} s") from None


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


__all__ = ["AsyncGuardedTool", "GuardedTool", "IdemwatchError", "backoff_delay", "describe"]
