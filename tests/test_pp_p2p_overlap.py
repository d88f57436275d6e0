"""Issue 12: pipeline sends under the interleaved schedule hide behind the next model chunk's compute.

Megatron-LM overlaps the interleaved schedule's sends and receives (``overlap_p2p_comm``; off for
1F1B, ``megatron/training/arguments.py`` @d98e8a64) and Megatron-Bridge sets it for ``vp > 1``
(``training/comm_overlap.py`` @v0.3.0). Checked through ``plan_search.estimate`` on Megatron-Bridge's
Llama 3 70B H100 FP8 plan (tp 4, pp 8, vp 5, 64 GPUs, GBS 256, seq 8192).
"""

import pytest

import plan_search as ps
from plan_search.hardware.catalog import get_cluster

PLAN = dict(num_gpus=64, tp=4, pp=8, micro_batch=1, global_batch=256, seq_len=8192, precision="fp8-current")


def test_interleaved_sends_hidden_1f1b_sends_priced_at_the_overlap_prior():
    inter = ps.estimate("llama3.1-70b", "h100-sxm", vpp=5, **PLAN)
    plain = ps.estimate("llama3.1-70b", "h100-sxm", vpp=1, **PLAN)
    # interleaved: a 33.5 MB send per chunk (8192 x 8192 / tp4 bf16) takes ~0.8 ms over the NIC,
    # a 2-layer chunk's forward ~7.6 ms: nothing exposed
    assert inter.time.pp_comm_s == 0.0
    # 1F1B: dp 2 x tp 4 fills the 8-GPU node, so the stage neighbours talk over the NIC; one
    # forward and one backward send per micro-batch, 128 micro-batches, (1 - pp_overlap) exposed
    c = get_cluster("h100-sxm")
    nbytes = 2.0 * 8192 * 8192 / 4
    send_s = nbytes / (c.node.inter_node_gbps * 1e9 * c.efficiency.inter_bw_eff) + c.node.inter_latency_us * 1e-6
    expected = 128 * 2 * send_s * (1.0 - c.efficiency.pp_overlap)
    assert plain.time.pp_comm_s == pytest.approx(expected, rel=1e-9)
    assert 0.1 < plain.time.pp_comm_s < 1.0
