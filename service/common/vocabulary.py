"""The protocol's enumerations and how each front end spells them.

Every front end and the client read a mode or a method here and nowhere else: attnserve.v1
numbers them (`AttentionMode.POOLED == 2`, the enum name `ATTENTION_MODE_POOLED`); the JSON
API, V2 parameters and the command line write the word (`pooled`). `parse` takes either
spelling and raises `ValueError` naming the words; the server's edge turns that into
INVALID_ARGUMENT with the field's name (service/edges.py `parse_word`).
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
    def parse(cls, value: str) -> Self:
        """A member from its word ("last_layer", "last-layer") or its proto name; "" and
        "unspecified" are NONE, as an unset enum field is."""
        key = value.strip().lower().replace("-", "_").removeprefix(cls._prefix().lower())
        if key in ("", "unspecified"):
            return cls["NONE"]
        for member in cls:
            if member.word == key:
                return member
        raise ValueError(f"{value[:64]!r} is not an {cls.noun()}; use one of: {', '.join(cls.words())}")

    @classmethod
    def of_number(cls, number: int) -> Self:
        """A member from its attnserve.v1 number; 0 (unspecified) is NONE."""
        if number == 0:
            return cls["NONE"]
        try:
            return cls(number)
        except ValueError:
            raise ValueError(f"unknown {cls.noun()} {number}") from None


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
