"""The vocabulary's one reading of a mode or method word, its number table, and the attention
kind the bundle and the client share."""

from __future__ import annotations

import pytest

from attnserve.service.common.vocabulary import AttentionKind, AttentionMode, Attribution

KINDS = (AttentionMode, Attribution)


@pytest.mark.parametrize("kind", KINDS)
def test_parse_reads_words_proto_names_and_members(kind: type[AttentionMode] | type[Attribution]) -> None:
    for member in kind:
        assert kind.parse(member.word) is member
        assert kind.parse(member.word.upper().replace("_", "-")) is member
        assert kind.parse(f" {member.proto_name} ") is member
        assert kind.parse(member) is member
    assert kind.parse("") is kind.parse("unspecified") is kind.parse(kind.NONE.proto_name) is kind["NONE"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("heads", "'heads' is not an attention mode"),
        ("x" * 1000, "'" + "x" * 64 + "' is not an attention mode"),
        (3, "3 is not a string"),
        (None, "None is not a string"),
        (True, "True is not a string"),
        (2.5, "2.5 is not a string"),
        (2**200, "an integer of 201 bits is not a string"),
        (["pooled"] * 10_000, "a value of type list is not a string"),
        ({"mode": "pooled"}, "a value of type dict is not a string"),
        (Attribution.OCCLUSION, "<Attribution.OCCLUSION: 2> is not a string"),  # another kind's member
    ],
)
def test_parse_refuses_naming_the_kind_and_its_words(value: object, shown: str) -> None:
    with pytest.raises(ValueError) as caught:
        AttentionMode.parse(value)
    assert str(caught.value) == f"{shown}; use one of: none, pooled, last_layer, all, rollout"


def test_attribution_refusals_name_its_words() -> None:
    words = "; use one of: none, occlusion, shapley"
    for value, shown in (("lime", "'lime' is not an attribution method"), (7, "7 is not a string")):
        with pytest.raises(ValueError) as caught:
            Attribution.parse(value)
        assert str(caught.value) == shown + words


@pytest.mark.parametrize("kind", KINDS)
def test_the_number_table_agrees_with_of_number(kind: type[AttentionMode] | type[Attribution]) -> None:
    table = kind.numbered()
    assert table[0] is kind["NONE"] and set(table.values()) == set(kind)
    for number in range(-2, 12):
        if number in table:
            assert kind.of_number(number) is table[number]
        else:
            with pytest.raises(ValueError, match=f"unknown {kind.noun()} {number}"):
                kind.of_number(number)


def test_the_bundle_and_the_client_share_one_attention_kind() -> None:
    from attnserve.service.bundle import AttentionKind as bundled

    assert bundled is AttentionKind
    assert [kind.value for kind in AttentionKind] == ["pool", "self", "layers", "none"]
    read: str = "layers"  # as a client reads it from a reply
    assert read == AttentionKind.LAYERS and read in (AttentionKind.SELF, AttentionKind.LAYERS)
