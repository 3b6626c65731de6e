"""The reconciliation rules, on counts chosen to sit on each side of every bound."""

from __future__ import annotations

from loadtest.reconcile import reconcile


def test_identical_counts_match_exactly() -> None:
    counts = {("native", "OK"): 10, ("native", "INVALID_ARGUMENT"): 2, ("v2", "OK"): 5}
    result = reconcile(counts, {}, counts)
    assert result.ok
    assert result.totals == {"native": (12, 12), "v2": (5, 5)}
    assert all(row.allowed == (row.client, row.client) for row in result.rows)


def test_a_call_the_client_got_an_answer_for_but_the_server_did_not_count_is_lost() -> None:
    result = reconcile({("native", "OK"): 10}, {}, {("native", "OK"): 9})
    assert not result.ok
    assert any("fewer" in problem for problem in result.problems)


def test_a_call_counted_twice_is_a_mismatch() -> None:
    result = reconcile({("v2", "OK"): 10}, {}, {("v2", "OK"): 10, ("v2", "INTERNAL"): 1})
    assert not result.ok
    assert any("more than were sent" in problem for problem in result.problems)


def test_a_status_swapped_for_another_is_a_mismatch_even_when_totals_agree() -> None:
    client = {("native", "OK"): 10, ("native", "NOT_FOUND"): 1}
    server = {("native", "OK"): 11}
    result = reconcile(client, {}, server)
    assert not result.ok
    assert [row.code for row in result.rows if not row.ok] == ["NOT_FOUND", "OK"]


def test_deadline_exceeded_calls_may_end_with_any_status_or_never_reach_the_server() -> None:
    client = {("native", "OK"): 10, ("native", "DEADLINE_EXCEEDED"): 3}
    for server in (
        {("native", "OK"): 10},  # none of the three reached the server
        {("native", "OK"): 13},  # the server answered all three, too late
        {("native", "OK"): 11, ("native", "DEADLINE_EXCEEDED"): 1, ("native", "CANCELLED"): 1},
    ):
        result = reconcile(client, {}, server)
        assert result.ok, (server, result.problems)
        assert result.unresolved == {"native": 3}
    # ... but not more than the three, and never fewer answered calls than the client saw.
    assert not reconcile(client, {}, {("native", "OK"): 14}).ok
    assert not reconcile(client, {}, {("native", "OK"): 9, ("native", "DEADLINE_EXCEEDED"): 3}).ok


def test_abandoned_calls_are_unresolved_too() -> None:
    result = reconcile({("v2", "OK"): 4}, {"v2": 2}, {("v2", "OK"): 6})
    assert result.ok
    assert result.totals == {"v2": (6, 6)}
    assert "abandoned" in result.to_markdown()
