"""The ranks of the distributed tests (``python -m dist_worker OUT_DIR``, the
launcher :func:`dist_launch.run` starts, forking the ranks): the tiny Llama,
patched with pyrope, run tensor-parallel and context-parallel on the gloo
group of all ranks; what each run computed is saved to ``OUT_DIR/rank<r>.pt``
for the test to compare with its single-process run."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import pyrope
import context_parallel
import dist_launch
import qk_capture
import tensor_parallel
import tiny_llama


def tensor_parallel_run(rank, world):
    layers = qk_capture.Layers()
    qk_capture.register_sdpa(layers)
    model = tensor_parallel.shard(tiny_llama.build(qk_capture.SDPA), rank, world)
    ids, mask, positions = tiny_llama.batch()
    return qk_capture.run(model, layers, input_ids=ids, attention_mask=mask, position_ids=positions)


def context_parallel_run(rank, world, positions_from):
    """The rank's chunk; ``positions_from`` "global" (the chunk's slice of the
    whole batch's positions) or "local" (positions derived from the chunk's
    own mask, as if it were the whole sequence: wrong past rank 0)."""
    layers = qk_capture.Layers()
    attention = context_parallel.ContextParallelAttention(layers)
    context_parallel.register(attention)
    model = tiny_llama.build(context_parallel.NAME)
    ids, mask, positions = tiny_llama.batch()
    chunk = context_parallel.chunk_of(rank, world, ids.shape[1])
    attention.padding, attention.start = mask, chunk.start
    if positions_from == "global":
        chunk_positions = positions[:, chunk]
    else:
        chunk_positions = tiny_llama.positions_of(mask[:, chunk])
    return qk_capture.run(model, layers, input_ids=ids[:, chunk], position_ids=chunk_positions)


def rank_main(rank, world, out_dir):
    # what pyrope chose by itself under this launch, before anything sets it
    result = {"threads": pyrope.get_num_threads(), "cpus": len(os.sched_getaffinity(0)),
              "torch_threads": torch.get_num_threads()}
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    try:
        result["tensor_parallel"] = tensor_parallel_run(rank, world)
        result["context_parallel"] = context_parallel_run(rank, world, "global")
        result["context_parallel_local"] = context_parallel_run(rank, world, "local")
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    dist_launch.fork_ranks(rank_main, sys.argv[1])
