"""Pure record rules: ``stateOrder``, reachable advances, materialization, order.

States are :class:`~leasegate.core.wire.env.BindingState` models: frozen and
fully normalized by the decoder, so model equality *is* the reference's
canonical-JSON equality (ER-084): key order never matters, arrays compare in
order, and a binding is always present (``null`` or a binding).
"""

from __future__ import annotations

from typing import Final, Literal

from ..wire.env import (
    BindingOmit,
    BindingState,
    BindingWithhold,
    Head,
    Materialization,
    Withheld,
)

__all__ = [
    "desired_withheld",
    "is_plain_value_advance",
    "is_reachable_record_advance",
    "locale_key",
    "same_head",
    "state_order",
]

StateOrder = Literal["same", "newer", "older", "conflict"]


def same_head(a: Head, b: Head) -> bool:
    """``sameProjectEnvHead``: every head field equal (decided: the whole head)."""
    return a == b


# ER-081 (mixed signs: conflict); ER-082 (equal heads); ER-083 (forward deltas).
def state_order(incoming: BindingState, current: BindingState) -> StateOrder:
    """``stateOrder`` of the reference (ER-080–ER-084).

    Returns ``"older"``, ``"conflict"``, ``"same"`` or ``"newer"`` from the
    revision/generation deltas, then tombstone, binding, policy epoch,
    listing generation and value reference. Never raises.
    """
    ih, ch = incoming.head, current.head
    dr = ih.revision - ch.revision
    dg = ih.generation - ch.generation
    if dr < 0 and dg <= 0:
        return "older"
    if dg < 0 and dr <= 0:
        return "older"
    if dr < 0 or dg < 0:
        return "conflict"
    if dr == 0 and dg == 0:
        if not same_head(ih, ch):
            return "conflict"
        if incoming.binding != current.binding or incoming.policy_epoch != current.policy_epoch:
            return "conflict"
        if incoming.listing_generation < current.listing_generation:
            return "older"
        if incoming.listing_generation == current.listing_generation:
            return "same" if incoming == current else "conflict"
        return "newer"
    if incoming.listing_generation < current.listing_generation:
        return "conflict"
    if dr == 0 and (
        ih.tombstone != ch.tombstone
        or incoming.binding != current.binding
        or incoming.policy_epoch != current.policy_epoch
    ):
        return "conflict"
    if dg == 0 and (ih.tombstone != ch.tombstone or ih.value_ref != ch.value_ref):
        return "conflict"
    return "newer"


# ER-074 (a lower listing generation is never reachable); ER-075 (equal r and g: a listing-only
# advance).
def is_reachable_record_advance(incoming: BindingState, current: BindingState | None) -> bool:
    """``isReachableRecordAdvance`` (ER-072–ER-079; the table in ``docs/env-replica.md``).

    With no current entry only an initial head is reachable: (revision 1,
    generation 1, live) or (revision 1, generation 0, tombstone). Never raises.
    """
    ih = incoming.head
    if current is None:
        return ih.revision == 1 and (
            (ih.generation == 1 and not ih.tombstone) or (ih.generation == 0 and ih.tombstone)
        )
    ch = current.head
    dr = ih.revision - ch.revision
    dg = ih.generation - ch.generation
    if incoming.listing_generation < current.listing_generation:
        return False
    same_policy = (
        incoming.binding == current.binding and incoming.policy_epoch == current.policy_epoch
    )
    if dr == 0 and dg == 0:
        return (
            same_head(ih, ch)
            and same_policy
            and incoming.listing_generation > current.listing_generation
        )
    if dr == 0 and dg == 1:
        return not ch.tombstone and not ih.tombstone and same_policy
    if dr == 1 and dg == 0:
        return not ch.tombstone and not ih.tombstone and ih.value_ref == ch.value_ref
    if dr == 1 and dg == 1:
        if ch.generation == 0:
            return ch.tombstone and not ih.tombstone
        return ch.tombstone != ih.tombstone and same_policy
    return False


def is_plain_value_advance(incoming: BindingState, current: BindingState) -> bool:
    """The common apply, decided cheaply: a new value generation of a live record.

    Same revision, generation one higher, neither a tombstone, the same
    binding and policy epoch, and a listing generation not lower. Sufficient
    (never necessary) for :func:`state_order` to be ``"newer"`` *and*
    :func:`is_reachable_record_advance` to hold; when it is ``False`` the
    caller asks those two. Never raises.
    """
    ih, ch = incoming.head, current.head
    return (
        ih.revision == ch.revision
        and ih.generation == ch.generation + 1
        and not ih.tombstone
        and not ch.tombstone
        and incoming.listing_generation >= current.listing_generation
        and incoming.policy_epoch == current.policy_epoch
        and incoming.binding == current.binding
    )


_TOMBSTONE: Final = Withheld(reason="tombstone")
_POLICY_UNKNOWN: Final = Withheld(reason="policy_epoch_unknown")
_OMITS: Final = Withheld(reason="binding_omits")


def desired_withheld(state: BindingState, policy_epochs: frozenset[int]) -> Materialization | None:
    """The withheld materialization of ``state``, or ``None`` if it must be read.

    First match wins: tombstone; ``policyEpoch`` null or unknown; binding
    ``omit``; binding ``withhold`` (its reason verbatim). Reference:
    ``desiredMaterialization`` (ER-095).
    """
    if state.head.tombstone:
        return _TOMBSTONE
    if state.policy_epoch is None or state.policy_epoch not in policy_epochs:
        return _POLICY_UNKNOWN
    b = state.binding
    if isinstance(b, BindingOmit):
        return _OMITS
    if isinstance(b, BindingWithhold):
        return Withheld(reason=b.reason)
    return None


def _rank(ch: str) -> int:
    if ch == "_":
        return 0
    if "0" <= ch <= "9":
        return 1 + ord(ch) - 48
    lo = ch.lower()
    if "a" <= lo <= "z":
        return 11 + ord(lo) - 97
    return 100 + ord(ch)


def locale_key(key: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Sort key reproducing Node 20 ICU ``localeCompare`` (en-US) on env keys.

    Primary: character by character, case-insensitive, ``_`` < digits <
    letters, a shorter prefix first; tie: case by position, lowercase first.
    So ``"_a" < "b" < "B"``. Catalog port note 8 (ER-125).
    """
    return (tuple(_rank(c) for c in key), tuple(1 if c.isupper() else 0 for c in key))
