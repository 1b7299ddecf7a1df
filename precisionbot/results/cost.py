"""What a run cost: GPU minutes and an estimated price, from the runner's instance type and the measured wall time.

Pure: a small price table and arithmetic, no I/O. The prices are **on-demand list prices** of Amazon EC2 (Linux,
us-east-1, per instance-hour) as listed in June 2025, after the June 2025 price cut for P4/P5 instances. They
are estimates: a region, a savings plan, spot capacity or a later list change moves them, so the config's
``runner.price_per_hour`` overrides the table for the configured instance type, and a type not in the table
gets no price (GPU minutes are still stated).

The job is billed for more than the checks' wall time (boot, engine start, model download), so the comment's
price is the part the checks themselves took; the README's "cost per PR" table adds a typical overhead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PRICES_AS_OF = "2025-06"
"""When the list prices below were read (EC2 on-demand, Linux, us-east-1)."""


@dataclass(frozen=True)
class InstancePrice:
    gpus: int
    gpu: str
    usd_per_hour: float


PRICES: Mapping[str, InstancePrice] = {
    "g5.xlarge": InstancePrice(1, "A10G 24 GB", 1.006),
    "g5.12xlarge": InstancePrice(4, "A10G 24 GB", 5.672),
    "g6.xlarge": InstancePrice(1, "L4 24 GB", 0.805),
    "g6.12xlarge": InstancePrice(4, "L4 24 GB", 4.602),
    "g6e.xlarge": InstancePrice(1, "L40S 48 GB", 1.861),
    "g6e.12xlarge": InstancePrice(4, "L40S 48 GB", 10.493),
    "p4d.24xlarge": InstancePrice(8, "A100 40 GB", 21.958),
    "p5.48xlarge": InstancePrice(8, "H100 80 GB", 55.040),
}
"""Instance type → GPUs and on-demand list price (see the module docstring for the date and the caveats)."""


@dataclass(frozen=True)
class RunCost:
    wall_s: float
    instance_type: str | None
    gpus: int | None
    gpu_minutes: float | None
    usd: float | None
    usd_per_hour: float | None
    source: str
    """Where the price came from: ``list price 2025-06``, ``config`` or ``""`` (no price)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "gpus": self.gpus,
            "gpu_minutes": self.gpu_minutes,
            "usd": self.usd,
            "usd_per_hour": self.usd_per_hour,
            "price_source": self.source,
        }


def run_cost(
    wall_s: float, instance_type: str | None, *, usd_per_hour: float | None = None, gpus: int | None = None
) -> RunCost:
    """The cost of ``wall_s`` seconds on ``instance_type``; ``usd_per_hour`` (the config's) overrides the
    table's price, ``gpus`` its GPU count. Unknown type and no override: GPU minutes only where ``gpus`` is
    given, no price."""
    entry = PRICES.get(instance_type or "")
    n = gpus if gpus is not None else (entry.gpus if entry is not None else None)
    price, source = None, ""
    if usd_per_hour is not None:
        price, source = usd_per_hour, "config"
    elif entry is not None:
        price, source = entry.usd_per_hour, f"on-demand list price {PRICES_AS_OF}"
    hours = max(0.0, wall_s) / 3600.0
    return RunCost(
        wall_s=wall_s,
        instance_type=instance_type,
        gpus=n,
        gpu_minutes=None if n is None else hours * 60.0 * n,
        usd=None if price is None else hours * price,
        usd_per_hour=price,
        source=source,
    )


def per_pr(instance_type: str, minutes: float) -> float:
    """The on-demand price of ``minutes`` on ``instance_type`` (the README's cost-per-PR table)."""
    return PRICES[instance_type].usd_per_hour * minutes / 60.0
