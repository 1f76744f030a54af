"""The error every communication failure becomes (``lsgd.CommunicationError``), and the block that
makes it: its message names the rank, the operation, how long it waited and the timeout."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Iterator


class CommunicationError(RuntimeError):
    """A collective, exchange or store operation failed, usually because a peer died or hung
    (the error torch.distributed raised is chained: ``__cause__``)."""


def seconds_text(value: datetime.timedelta) -> str:
    return f"{value.total_seconds():g} s"


@contextlib.contextmanager
def communication_errors(rank: int, operation: str, timeout: datetime.timedelta,
                         absent: Callable[[], list[int] | None] | None = None
                         ) -> Iterator[None]:
    """Re-raise torch.distributed's errors in the block as :class:`CommunicationError`.

    ``operation`` says what was attempted and among whom, e.g. ``"broadcast
    from rank 0 among all workers"``; ``timeout`` is the one that bounded it.
    When the timeout ran out, ``absent()`` (if given) names the workers that
    never reached the operation (None: unknown); the message names them.
    """
    start = time.monotonic()
    try:
        yield
    except CommunicationError:
        raise
    except RuntimeError as error:  # DistError and its subclasses included
        waited = time.monotonic() - start
        took = f"{waited:.1f} s" if waited >= 0.1 else "less than 0.1 s"
        culprit = "Another worker has probably died, hung or become unreachable."
        limit = f"the collective timeout of {seconds_text(timeout)}"
        if waited >= 0.9 * timeout.total_seconds():
            when = f"after waiting {took}: {limit} ran out"
            missing = absent() if absent is not None else None
            if missing:
                names = ", ".join(str(r) for r in missing)
                culprit = (f"Worker{'s' if len(missing) > 1 else ''} {names} never reached it "
                           "(hung, stopped, unreachable or far behind).")
        else:
            when = f"after {took}, before {limit} ran out"
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        first = lines[0] if lines else repr(error)  # C++ stack traces stay in the chained error
        raise CommunicationError(
            f"Rank {rank} gave up on the {operation} {when}. {culprit} Check the other workers' "
            "logs for the first error; if the workers are only slow (on a long evaluation, "
            "say), raise the timeout (the timeout argument of lsgd.launch; lsgd train "
            f"--timeout).\nOriginal error: {type(error).__name__}: {first}") from error
