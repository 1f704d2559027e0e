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
        idemwatch.NotAttempted("down"),
        idemwatch.DoneNotRecorded("?", key=KEY, result={"refund_id": "rf_1"}),
        idemwatch.PayloadMismatch("422", key=KEY, differing_fields=["amount_p"], intent_key="c" * 64),
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
    assert results[3]["key"] == KEY and results[6]["key"] == KEY, "the key to ask about"
    assert results[8]["result"] == {"refund_id": "rf_1"} and "is done" in results[8]["next"]
    assert results[9]["key"] == KEY and "second refund" in results[9]["next"]


def test_unknown_says_calling_again_is_safe_only_when_the_key_would_be_the_same() -> None:
    unknown = idemwatch.OutcomeUnknown("?", key=KEY, reason="timeout after 10 s")
    plain = idemwatch.for_model(unknown, action="the refund")["next"]
    assert "safe" not in plain and "do not call the tool again" in plain.lower()
    stable = idemwatch.for_model(unknown, action="the refund", same_key=True)["next"]
    assert "calling again with the same request is safe" in stable


def test_nothing_attempted_and_done_but_unrecorded_are_never_unknown() -> None:
    assert idemwatch.for_model(idemwatch.NotAttempted("down"))["status"] == "not_attempted"
    done = idemwatch.DoneNotRecorded("?", key=KEY, result={"refund_id": "rf_9"})
    assert idemwatch.for_model(done)["status"] == "done_not_recorded"


def test_a_natural_key_refusal_names_the_first_action() -> None:
    err = idemwatch.PayloadMismatch("422", key=KEY, differing_fields=["amount_p"], intent_key="c" * 64)
    err.existing = idemwatch.KeyState(key=KEY, status="DONE", fencing_token=1, result={"refund_id": "rf_1"})
    out = idemwatch.for_model(err, action="the refund")
    assert out["status"] == "already_requested"
    assert (out["key"], out["existing_status"], out["result"]) == (KEY, "DONE", {"refund_id": "rf_1"})
    assert "it is DONE" in out["next"] and "approves" in out["next"]


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
