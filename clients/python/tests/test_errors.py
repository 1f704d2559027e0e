"""Unit tests of the error mapping: canned problem documents (as docs/GUARD.md shows
them) parsed into the error types. No server here: these are parser tests."""

from __future__ import annotations

import httpx
import pytest

import idemwatch
from idemwatch._client import _check

KEY = "a" * 64


def problem(code: str, status: int, **extra: object) -> dict[str, object]:
    return {
        "type": f"urn:idemwatch:problem:{code}",
        "title": code.replace("_", " ").capitalize(),
        "status": status,
        "detail": f"a sentence about {code}",
        "code": code,
        "key": KEY,
        **extra,
    }


CASES = [
    (problem("invalid", 400, field="args"), idemwatch.InvalidRequest, False),
    (problem("unknown_tool", 400, field="intent.tool"), idemwatch.UnknownTool, False),
    (problem("forbidden", 403), idemwatch.Forbidden, False),
    (problem("not_found", 404), idemwatch.NotFound, False),
    (problem("in_flight", 409, retry_after=7, lease_until="2026-11-30T14:02:41Z"), idemwatch.InFlight, True),
    (problem("needs_human_review", 409, provider_retention_until="2026-11-30T14:02:41Z"), idemwatch.NeedsHumanReview, False),
    (problem("lease_lost", 409, current_token=3), idemwatch.LeaseLost, False),
    (problem("payload_mismatch", 422, stored_fingerprint="s", fingerprint="f", differing_fields=["amount_p"]), idemwatch.PayloadMismatch, False),
    (problem("unavailable", 503, retry_after=2), idemwatch.Unavailable, True),
    (problem("internal", 500), idemwatch.Unavailable, True),
    (problem("too_large", 413), idemwatch.InvalidRequest, False),
]


@pytest.mark.parametrize(("doc", "cls", "retryable"), CASES, ids=[c[0]["code"] for c in CASES])
def test_each_code_maps_to_its_error(doc: dict, cls: type, retryable: bool) -> None:
    err = idemwatch.from_problem(int(doc["status"]), doc)
    assert type(err) is cls
    assert err.retryable is retryable
    assert err.code == doc["code"] and err.key == KEY and err.status == doc["status"]
    assert err.detail == doc["detail"]


def test_code_specific_members_are_carried() -> None:
    in_flight = idemwatch.from_problem(409, CASES[4][0])
    assert isinstance(in_flight, idemwatch.InFlight)
    assert in_flight.retry_after == 7 and in_flight.lease_until == "2026-11-30T14:02:41Z"
    mismatch = idemwatch.from_problem(422, CASES[7][0])
    assert isinstance(mismatch, idemwatch.PayloadMismatch)
    assert mismatch.differing_fields == ["amount_p"]
    assert (mismatch.stored_fingerprint, mismatch.fingerprint) == ("s", "f")
    lost = idemwatch.from_problem(409, CASES[6][0])
    assert isinstance(lost, idemwatch.LeaseLost) and lost.current_token == 3
    review = idemwatch.from_problem(409, CASES[5][0])
    assert isinstance(review, idemwatch.NeedsHumanReview)
    assert review.provider_retention_until == "2026-11-30T14:02:41Z"
    invalid = idemwatch.from_problem(400, CASES[0][0])
    assert isinstance(invalid, idemwatch.InvalidRequest) and invalid.field == "args"


def test_retry_after_falls_back_to_the_header() -> None:
    doc = problem("in_flight", 409)
    err = idemwatch.from_problem(409, doc, retry_after_header="4")
    assert err.retry_after == 4
    err = idemwatch.from_problem(409, doc, retry_after_header="Wed, 21 Oct 2015 07:28:00 GMT")
    assert err.retry_after == 0  # a date in the past: retry now


@pytest.mark.parametrize(
    ("status", "doc"),
    [
        (409, problem("some_future_code", 409)),
        (502, None),
        (500, {"error": "boom"}),
        (504, problem("gateway_timeout", 504)),
    ],
)
def test_unknown_codes_and_5xx_are_retryable_and_never_a_failure(status: int, doc: dict | None) -> None:
    err = idemwatch.from_problem(status, doc)
    assert isinstance(err, idemwatch.Unavailable)
    assert err.retryable
    assert not isinstance(err, idemwatch.OperationFailed)


def _answer(status: int, body: bytes, content_type: str, **headers: str) -> httpx.Response:
    return httpx.Response(status, content=body, headers={"Content-Type": content_type, **headers})


def test_a_problem_response_is_parsed_with_its_headers() -> None:
    resp = _answer(
        409,
        b'{"type":"urn:idemwatch:problem:in_flight","title":"In flight","status":409,'
        b'"detail":"held","code":"in_flight","key":"' + KEY.encode() + b'"}',
        "application/problem+json",
        **{"Retry-After": "3", "Idempotency-Key": KEY},
    )
    with pytest.raises(idemwatch.InFlight) as err:
        _check(resp)
    assert err.value.retry_after == 3 and err.value.key == KEY


def test_an_html_error_page_from_a_proxy_is_unavailable() -> None:
    with pytest.raises(idemwatch.Unavailable) as err:
        _check(_answer(502, b"<html>Bad gateway</html>", "text/html"))
    assert err.value.status == 502 and err.value.retryable


def test_a_network_error_is_unavailable_not_a_failure() -> None:
    from conftest import free_port

    client = idemwatch.Client(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(idemwatch.Unavailable) as err:
        client.admit("issue_refund", idemwatch.Intent("t", "w", "1", "i"), {"a": 1})
    assert err.value.retryable and isinstance(err.value.__cause__, httpx.HTTPError)


def test_errors_say_what_to_do() -> None:
    err = idemwatch.from_problem(409, CASES[4][0])
    assert "retry later with the same intent" in str(err)
    assert "never retry as is" in str(idemwatch.from_problem(422, CASES[7][0]))


def test_only_an_explicit_definitive_verdict_is_a_failure() -> None:
    from idemwatch._tool import _classify

    definitive = lambda e: "definitive"  # noqa: E731
    assert _classify(None, ValueError()) is idemwatch.ErrorClass.AMBIGUOUS
    assert _classify(definitive, ValueError()) is idemwatch.ErrorClass.DEFINITIVE
    assert _classify(definitive, TimeoutError()) is idemwatch.ErrorClass.AMBIGUOUS
    assert _classify(lambda e: 1 / 0, ValueError()) is idemwatch.ErrorClass.AMBIGUOUS
    assert _classify(lambda e: "maybe", ValueError()) is idemwatch.ErrorClass.AMBIGUOUS
    assert _classify(definitive, KeyboardInterrupt()) is idemwatch.ErrorClass.AMBIGUOUS


def test_backoff_honours_retry_after_and_grows() -> None:
    from idemwatch._tool import backoff_delay

    assert backoff_delay(0, 5, 0.5, 30) >= 5
    assert 4 <= backoff_delay(3, None, 0.5, 30) <= 4.25
    assert backoff_delay(20, None, 0.5, 30) <= 30.25


def test_a_401_says_the_token_is_missing_or_wrong() -> None:
    err = idemwatch.from_problem(401, problem("unauthorized", 401))
    assert isinstance(err, idemwatch.Unauthorized) and not err.retryable
    assert "missing or wrong" in str(err)


def test_a_404_from_a_route_that_is_not_the_guard_is_a_configuration_error() -> None:
    err = idemwatch.from_problem(404, None)
    assert isinstance(err, idemwatch.ConfigurationError) and not err.retryable
    assert "does not lead to an idemwatch guard" in str(err)
    with pytest.raises(idemwatch.ConfigurationError):
        idemwatch.for_model(err)
    # The guard's own 404 names the key: still NotFound.
    assert isinstance(idemwatch.from_problem(404, problem("not_found", 404)), idemwatch.NotFound)


def test_decimal_amounts_are_sent_as_numbers_or_refused_by_name() -> None:
    from decimal import Decimal

    from idemwatch._client import _json_value

    assert _json_value({"amount": Decimal("45.00"), "x": [Decimal("0.5")]}, "args") == {
        "amount": 45,
        "x": [0.5],
    }
    with pytest.raises(idemwatch.InvalidRequest) as err:
        _json_value({"amount": Decimal("0.10000000000000000000001")}, "args")
    assert err.value.field == "args.amount"


def test_a_redirect_is_refused_as_a_configuration_error_never_followed() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:8080/api/v1/guard/admit")
    response = httpx.Response(307, headers={"Location": "http://evil.example/admit"}, request=request)
    with pytest.raises(idemwatch.ConfigurationError) as err:
        _check(response)
    assert "evil.example" in str(err.value) and not err.value.retryable
