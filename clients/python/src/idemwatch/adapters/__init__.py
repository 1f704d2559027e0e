"""Thin adapters from a guarded function to the agent frameworks' tools.

Write the tool as a plain function with typed parameters and a docstring; it reads the
idempotency key from :func:`idemwatch.current_call` and passes it to the provider::

    def issue_refund(order: str, amount_p: int, reason: str = "") -> dict:
        \"\"\"Refund an order; amount in pence.\"\"\"
        return payments.create_refund(order=order, amount_p=amount_p,
                                      idempotency_key=idemwatch.current_call().key)

    refund = guard_function(idem, issue_refund, find_by_key=payments.find_refund,
                            object_fields=["order"], action="the refund", number_field="refund_no")

then hand ``refund`` (and a :class:`~idemwatch.StatusTool`) to a framework:
``idemwatch.adapters.langchain``, ``.openai_agents``, ``.pydantic_ai``. Each keeps the
function's name, signature and docstring as the model sees them, derives the intent from
the run and the business object (never the turn or the tool-call id), and answers the
model with :func:`idemwatch.for_model`'s dict. The frameworks are optional extras
(``pip install "idemwatch[langchain]"``); the base package does not import them.
"""

from ._core import GuardedFunction, guard_function

__all__ = ["GuardedFunction", "guard_function"]
