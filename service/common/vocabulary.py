"""The protocol's enumerations and how each front end spells them.

Every front end and the client read a mode or a method here and nowhere else: attnserve.v1
numbers them (`AttentionMode.POOLED == 2`, the enum name `ATTENTION_MODE_POOLED`); the JSON
API, V2 parameters and the command line write the word (`pooled`). `parse` is the one reading
of a word: it takes either spelling and raises `ValueError` naming the kind and its words; the
server's edge turns that into INVALID_ARGUMENT with the field's name (service/edges.py
`parse_word`), the JSON API's validator into a 400 naming the field. `numbered` is the table
an edge builds once to read a number with a look-up. `AttentionKind` is what a model's
attention output holds, as its bundle and its model information write it.
"""

from __future__ import annotations

import enum
from typing import Self


class _Spelled(enum.IntEnum):
    """An attnserve.v1 enum: its number, its word and its proto name."""

    @classmethod
    def _prefix(cls) -> str:
        raise NotImplementedError

    @classmethod
    def noun(cls) -> str:
        """What a member is, in words ("attention mode")."""
        raise NotImplementedError

    @property
    def word(self) -> str:
        """How JSON, V2 and the command line write it ("last_layer")."""
        return self.name.lower()

    @property
    def proto_name(self) -> str:
        """The attnserve.v1 enum value's name ("ATTENTION_MODE_LAST_LAYER")."""
        return f"{self._prefix()}{self.name}"

    @classmethod
    def words(cls) -> tuple[str, ...]:
        return tuple(member.word for member in cls)

    @classmethod
    def parse(cls, value: object) -> Self:
        """A member from its word ("last_layer", "last-layer") or its proto name; "" and
        "unspecified" are NONE, as an unset enum field is; a member is itself. Anything else,
        a string of no member or a value that is not a string, is a ValueError naming the
        kind's words."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, str):
            raise ValueError(f"{_shown(value)} is not a string; use one of: {', '.join(cls.words())}")
        key = value.strip().lower().replace("-", "_").removeprefix(cls._prefix().lower())
        if key in ("", "unspecified"):
            return cls["NONE"]
        for member in cls:
            if member.word == key:
                return member
        raise ValueError(f"{value[:64]!r} is not an {cls.noun()}; use one of: {', '.join(cls.words())}")

    @classmethod
    def numbered(cls) -> dict[int, Self]:
        """Every number a request may carry, to its member (0, an unset field, to NONE): the
        table an edge builds once, so that reading a number is a look-up."""
        return {0: cls["NONE"], **{member.value: member for member in cls}}

    @classmethod
    def of_number(cls, number: int) -> Self:
        """A member from its attnserve.v1 number; 0 (unspecified) is NONE."""
        if number == 0:
            return cls["NONE"]
        try:
            return cls(number)
        except ValueError:
            raise ValueError(f"unknown {cls.noun()} {number}") from None


def _shown(value: object) -> str:
    """A value that is not a string, for a refusal: a scalar as written, anything else by its
    type (a client's list or integer may be of any size)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return repr(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    if value is None or isinstance(value, bool | float):
        return repr(value)
    return f"a value of type {type(value).__name__}"


class AttentionMode(_Spelled):
    """The attention a reply carries per text. Values equal attnserve.v1 AttentionMode."""

    NONE = 1
    POOLED = 2
    LAST_LAYER = 3
    ALL = 4
    ROLLOUT = 5

    @classmethod
    def _prefix(cls) -> str:
        return "ATTENTION_MODE_"

    @classmethod
    def noun(cls) -> str:
        return "attention mode"


class Attribution(_Spelled):
    """An attribution method. Values equal attnserve.v1 AttributionMethod."""

    NONE = 1
    OCCLUSION = 2
    SHAPLEY = 3

    @classmethod
    def _prefix(cls) -> str:
        return "ATTRIBUTION_METHOD_"

    @classmethod
    def noun(cls) -> str:
        return "attribution method"


class AttentionKind(enum.StrEnum):
    """What a model's `attention` output holds (the bundle's AttentionSpec, ModelInfo's
    `attention.kind`). A `str`, so the manifest, JSON and attnserve.v1 carry the same words
    as ever, and a kind read from a reply compares equal to its member."""

    POOL = "pool"
    SELF = "self"
    LAYERS = "layers"
    NONE = "none"
