"""The model-facing results: one status per outcome, each saying what to do next."""

from __future__ import annotations

import pytest

import idemwatch
from idemwatch.results import STATUSES

KEY = "b" * 64


def test_every_outcome_has_a_status_and_a_next_step() -> None:
    values = [
        idemwatch.Outcome(KEY, {"refund_id": "rf_1"}, replayed=False),
        idemwatch.Outcome(KEY, {"refund_id": "rf_1"}, replayed=True),
        idemwatch.OperationFailed("no", key=KEY, error="card declined"),
        idemwatch.OutcomeUnknown("?", key=KEY, reason="timeout after 10 s"),
        idemwatch.InFlight("held", key=KEY, retry_after=3),
        idemwatch.PayloadMismatch("422", key=KEY, differing_fields=["amount_p"]),
        idemwatch.NeedsHumanReview("stop", key=KEY),
    ]
    results = [idemwatch.for_model(v, action="the refund") for v in values]
    assert [r["status"] for r in results] == list(STATUSES)
    for r in results:
        assert r["next"] and "the refund" in r["next"]
    assert results[0]["result"] == {"refund_id": "rf_1"}
    assert results[2]["error"] == "card declined"
    assert results[4]["retry_after_seconds"] == 3
    assert results[5]["differing_fields"] == ["amount_p"]
    assert "check its status" in results[3]["next"].lower()


def test_a_guard_outage_is_unknown_for_the_model_never_a_failure() -> None:
    assert idemwatch.for_model(idemwatch.Unavailable("down"))["status"] == "unknown"
    assert idemwatch.for_model(idemwatch.LeaseLost("stale"))["status"] == "in_flight"


def test_programming_errors_are_not_hidden() -> None:
    with pytest.raises(KeyError):
        idemwatch.for_model(KeyError("x"))
    with pytest.raises(idemwatch.InvalidRequest):
        idemwatch.for_model(idemwatch.InvalidRequest("bad", field="args"))


def test_a_mismatch_on_a_key_whose_outcome_is_unknown_does_not_say_it_ran() -> None:
    unknown = idemwatch.PayloadMismatch(
        "422",
        key=KEY,
        differing_fields=["amount_p"],
        problem={"code": "payload_mismatch", "stored_status": "UNKNOWN", "awaiting_person": True},
    )
    done = idemwatch.PayloadMismatch(
        "422", key=KEY, differing_fields=["amount_p"], problem={"stored_status": "DONE"}
    )
    checking = idemwatch.for_model(unknown, action="the refund")["next"]
    assert "may or may not have happened; it is being checked" in checking
    assert "already ran" not in checking
    assert "already ran" in idemwatch.for_model(done, action="the refund")["next"]
