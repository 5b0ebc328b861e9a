"""Plans beyond one node: whole 8-GPU nodes of a catalog offer, priced per node, with the network in the speed."""

from __future__ import annotations

import pytest

from gpuplanner.plan.catalog import PriceOffer, load_catalog
from gpuplanner.plan.compare import MULTI_NODE_COUNTS, compare
from gpuplanner.plan.model_spec import from_preset
from gpuplanner.plan.planner import PlanRequest, cheapest_offer, make_plan
from gpuplanner.plan.runtime import Workload
from gpuplanner.plan.setup import TrainSetup

CATALOG = load_catalog()
LLAMA_8B = from_preset("llama-3.1-8b")


def offer(count: int, price: float) -> PriceOffer:
    return PriceOffer("p", "r", "H100 SXM", count, f"{count}x", price, None, None, None, "2026-11-01", "test")


def test_more_than_eight_gpus_are_priced_as_whole_eight_gpu_nodes() -> None:
    offers = [offer(1, 2.0), offer(8, 2.5)]
    choice = cheapest_offer(offers, 16, spot=False)
    assert choice is not None
    assert choice.billed_gpus == 16 and choice.instance_type == "2 x 8x" and choice.usd_per_gpu_hour == 2.5
    assert cheapest_offer(offers, 12, spot=False) is None  # not whole nodes
    assert cheapest_offer([offer(1, 2.0), offer(4, 2.0)], 16, spot=False) is None  # no full-size node


def test_a_multi_node_plan_is_priced_and_pays_for_the_network() -> None:
    setup = TrainSetup(micro_batch=1, seq_len=2048, sharding="fsdp", grad_checkpointing="full")
    request = PlanRequest(LLAMA_8B, setup, Workload(samples=100_000), gpu="H100 SXM")
    one_node = make_plan(PlanRequest(LLAMA_8B, TrainSetup(**{**setup.__dict__, "gpus": 8}), request.workload), CATALOG)
    two_nodes = make_plan(
        PlanRequest(LLAMA_8B, TrainSetup(**{**setup.__dict__, "gpus": 16}), request.workload), CATALOG
    )
    assert two_nodes.on_demand is not None and two_nodes.on_demand.billed_gpus == 16
    assert "2 x " in two_nodes.on_demand.instance_type
    assert not any("no catalog offer" in w for w in two_nodes.warnings)
    per_gpu_one = one_node.throughput.tokens_per_s / 8
    per_gpu_two = two_nodes.throughput.tokens_per_s / 16
    # twice the GPUs halve each one's share of the optimizer update, while the network adds exposed
    # communication; per GPU the two nearly cancel on HGX H100 nodes
    assert per_gpu_two == pytest.approx(per_gpu_one, rel=0.1)
    assert two_nodes.throughput.step.communication_s >= one_node.throughput.step.communication_s


def test_compare_adds_whole_nodes_only_when_one_node_misses_the_deadline() -> None:
    setup = TrainSetup(micro_batch=2, seq_len=2048, sharding="fsdp", grad_checkpointing="full")
    base = PlanRequest(LLAMA_8B, setup, Workload(samples=1_000_000), gpu="H100 SXM")
    relaxed = compare(PlanRequest(**{**base.__dict__, "deadline_hours": 1000.0}), CATALOG)
    assert max(row.gpus for row in relaxed) == 8
    tight = compare(PlanRequest(**{**base.__dict__, "deadline_hours": 6.0}), CATALOG)
    assert {row.gpus for row in tight} >= set(MULTI_NODE_COUNTS)
    usable = [row for row in tight if row.usable]
    assert usable and usable[0].gpus > 8
    assert usable[0].hours <= 6.0 or usable[0].pricing == "spot"


@pytest.mark.parametrize("gpus", [16, 32])
def test_the_step_model_counts_nodes(gpus: int) -> None:
    plan = make_plan(
        PlanRequest(LLAMA_8B, TrainSetup(gpus=gpus, sharding="fsdp", seq_len=1024), Workload(samples=10_000)), CATALOG
    )
    assert f"over {gpus} GPUs" in plan.throughput.source
