"""The identities in force, replayed from the journal (pure): one, or one per host once hosts
joined; an edit or a move replaces the one it is of; `left` removes one; an acceptance begins again.
And the verdict of a command against them."""

from __future__ import annotations

from iipub.store.config_identity import GONE, Identity, IdentityVerdict, judge, replay

A = Identity("/srv/a/iipub.toml", "1" * 64, "/srv/a/state/l.jsonl", "/srv/a/public")
B = Identity("/srv/b/iipub.toml", "2" * 64, "/srv/b/state/l.jsonl", "/srv/b/public")


def test_replay_keeps_one_identity_per_host_and_follows_edits_moves_and_departures() -> None:
    a_edited = Identity(A.config_path, "3" * 64, A.ledger_path, A.static_root)
    b_moved = Identity("/etc/iipub-b.toml", B.config_sha256, B.ledger_path, B.static_root)
    assert replay([("adopted", A)]) == [A]
    assert replay([("adopted", A), ("joined", B)]) == [A, B]
    assert replay([("adopted", A), ("joined", B), ("edited", a_edited)]) == [a_edited, B]
    assert replay([("adopted", A), ("joined", B), ("moved", b_moved)]) == [A, b_moved]
    assert replay([("adopted", A), ("joined", B), ("left", B)]) == [A]
    assert replay([("adopted", A), ("joined", B), ("accepted", b_moved)]) == [b_moved]
    assert replay([("adopted", A), ("joined", A)]) == [A]  # joining twice is one member


def test_a_command_is_judged_against_every_identity_in_force() -> None:
    assert judge([], A) == (IdentityVerdict.ADOPT, None)
    assert judge([A, B], B) == (IdentityVerdict.SAME, B)
    other = Identity("/tmp/iipub.toml", "9" * 64, "/tmp/l.jsonl", "/tmp/public")
    assert judge([A, B], other) == (IdentityVerdict.OTHER, B)
    assert GONE == "gone"
