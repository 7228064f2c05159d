"""The base of every config model (frozen, unknown keys refused) and each field's place in a campaign's identity."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

Identity = Literal["campaign", "run", "neutral_default"]
"""A field's place in a campaign's identity (``RatchetConfig.campaign_settings``):

- ``campaign``: defines what the campaign learns and how it is judged; rerunning a campaign name with
  another value is a settings conflict.
- ``run``: how or where it runs (files, devices, engine sizing, schedule, retention); never part of the identity.
- ``neutral_default``: added after stores existed, with a default that changes nothing; part of the
  identity only when set to another value, so a campaign recorded before the field existed continues.
"""
IDENTITIES: tuple[str, ...] = ("campaign", "run", "neutral_default")


def identity(kind: Identity) -> dict:
    """``json_schema_extra`` that declares a field's (or a whole section's) identity: ``Field(..., json_schema_extra=identity("run"))``.

    Raises:
        ValueError: ``kind`` is not one of ``IDENTITIES``.
    """
    if kind not in IDENTITIES:
        raise ValueError(f"identity {kind!r} is not one of {', '.join(IDENTITIES)}")
    return {"identity": kind}


def field_identity(info: FieldInfo, default: Identity | None = "campaign") -> Identity | None:
    """The identity a field declares, else ``default`` (a field of a section inherits the section's)."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return extra.get("identity", default)  # type: ignore[return-value]


# Seeds are bounded so every derived seed (base x 1,000,003 + round + 7919 x step, ratchet.common.seeds) stays far
# below 2^63, the largest seed torch accepts; 2^32 - 1 is also numpy's limit.
SEED_MAX = 2**32 - 1


def _merged(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``, tables merged key by key (a campaign inherits the top-level defaults)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
