"""pyrope under torch.distributed: a tiny random-weight Llama patched with
pyrope (``pyrope.integrations.transformers.patch``) on two gloo ranks of this
machine, started as torchrun would (tests/support/dist_launch.py; the ranks'
code is tests/support/dist_worker.py), against one process, this one,
running the same model whole in the same test run. Same config and seed in
every process: the same weights bit for bit.

**Tensor parallel** (tests/support/tensor_parallel.py): each rank holds half
the q heads and half the kv heads, every token at the same positions on
both; ``o_proj``'s partial products are summed by ``all_reduce``. Each
rank's rotated q and k, in every layer, must be its heads of the
one-process run bit for bit. The one-process run for that comparison sums
``o_proj``'s input columns in the ranks' two groups
(``tensor_parallel.GroupedLinear``): a plain ``o_proj`` sums them all at
once, so from the second layer on its hidden states, and q and k with them,
differ from the ranks' by rounding before pyrope sees them (measured on an
Intel Xeon, family 6 model 167: up to 3.2e-6 on q and k of the second layer).
The first layer is compared with the plain model too, and the logits with
the plain model within ``TOL``.

**Context parallel** (tests/support/context_parallel.py): each rank holds
half the sequence (a batch of two, one row left-padded), passes the
*global* position ids of its chunk, and its attention gathers every rank's
rotated keys and values and masks by global index. Each rank's rotated q and
k in every layer must be the one-process run's slice of them bit for bit,
and its logits the slice of the plain model's within ``TOL`` (measured: the
same bits). A chunk given positions counted from its own start instead
rotates rank 1's keys differently, which the last test checks, so these
comparisons can fail.

Before each q/k comparison, the q and k the projections gave (before the
rotation) are compared the same way: torch's arithmetic, not pyrope's, so a
failure there says the inputs differed, not the rotation.

``TOL``: the plain model and the tensor-parallel ranks differ only in how
``o_proj`` groups its 64-term float32 sums (one against two of 32), a few
float32 roundings (2^-24 relative) of each sum, carried through two layers,
the final norm and the head; measured 7.8e-7 of the largest logit (about
2^-20.3). 2^-17 (7.6e-6) leaves that an 8-fold margin, the bound
test_transformers_compiled.py allows for reordered float32 arithmetic; keys
rotated at wrong positions moved the logits by 1.2 of the largest (measured).
"""
import os

import pytest

from hf_peer import torch_and_transformers
from pyrope._engine.binding import MAX_THREADS

torch, transformers = torch_and_transformers("the torch.distributed tests")
import context_parallel  # noqa: E402  (these need torch and transformers)
import dist_launch  # noqa: E402
import qk_capture  # noqa: E402
import tensor_parallel  # noqa: E402
import tiny_llama  # noqa: E402

TOL = 2.0 ** -17
WORLD = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """What each rank computed (tests/support/dist_worker.py), rank by rank."""
    out = tmp_path_factory.mktemp("ranks")
    dist_launch.run("dist_worker", [out], WORLD, out)
    return [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(WORLD)]


def one_process(grouped=False):
    layers = qk_capture.Layers()
    qk_capture.register_sdpa(layers)
    model = tiny_llama.build(qk_capture.SDPA)
    if grouped:
        tensor_parallel.group_sums(model, WORLD)
    ids, mask, positions = tiny_llama.batch()
    return qk_capture.run(model, layers, input_ids=ids, attention_mask=mask, position_ids=positions)


@pytest.fixture(scope="module")
def plain():
    """The whole model in this process, as transformers runs it (sdpa)."""
    return one_process()


@pytest.fixture(scope="module")
def grouped():
    """The same, ``o_proj`` summing its columns in the ranks' groups."""
    return one_process(grouped=True)


def relative(ref, got):
    return float((ref - got).abs().max()) / max(float(ref.abs().max()), 1.0)


def assert_same_bits(ref, got, what):
    assert ref.shape == got.shape and torch.equal(ref, got), (
        f"{what}: differs by up to {float((ref - got).abs().max()):.3g}" if ref.shape == got.shape
        else f"{what}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")


def assert_rotated_by_pyrope(run):
    layers = tiny_llama.CONFIG["num_hidden_layers"]
    assert (run["calls"], run["fallbacks"]) == (layers, 0), "pyrope must rotate every layer's q and k"


def heads(rank, name):
    count = tiny_llama.CONFIG["num_attention_heads" if name.startswith("q") else "num_key_value_heads"]
    h = tensor_parallel.heads_of(rank, WORLD, count)
    return slice(h.start, h.stop)


def test_each_rank_defaults_to_its_share_of_the_cpus(ranks):
    for r in ranks:   # the launch sets LOCAL_WORLD_SIZE as torchrun does
        assert r["threads"] == max(1, min(MAX_THREADS, r["cpus"] // WORLD))


def test_tensor_parallel_ranks_rotate_their_heads_as_one_process_does(ranks, plain, grouped):
    for rank, result in enumerate(ranks):
        run = result["tensor_parallel"]
        assert_rotated_by_pyrope(run)
        for layer, got in run["layers"].items():
            for name in ("q_in", "k_in", "q", "k"):
                where = f"rank {rank}, layer {layer}, {name}"
                assert_same_bits(grouped["layers"][layer][name][:, heads(rank, name)], got[name], where)
                if layer == 0:
                    assert_same_bits(plain["layers"][layer][name][:, heads(rank, name)], got[name], where)


def test_tensor_parallel_logits_are_the_one_process_logits(ranks, plain, grouped):
    assert_rotated_by_pyrope(plain)
    for rank, result in enumerate(ranks):
        logits = result["tensor_parallel"]["logits"]
        assert relative(plain["logits"], logits) <= TOL, f"rank {rank}: {relative(plain['logits'], logits):.3g}"
        assert_same_bits(ranks[0]["tensor_parallel"]["logits"], logits, f"rank {rank}'s logits, rank 0's")


def test_context_parallel_ranks_rotate_their_chunks_at_global_positions(ranks, plain):
    for rank, result in enumerate(ranks):
        run = result["context_parallel"]
        assert_rotated_by_pyrope(run)
        chunk = context_parallel.chunk_of(rank, WORLD, tiny_llama.LENGTH)
        for layer, got in run["layers"].items():
            for name in ("q_in", "k_in", "q", "k"):
                assert_same_bits(plain["layers"][layer][name][:, :, chunk], got[name],
                                 f"rank {rank}, layer {layer}, {name}")


def test_context_parallel_logits_are_the_one_process_slice(ranks, plain):
    for rank, result in enumerate(ranks):
        chunk = context_parallel.chunk_of(rank, WORLD, tiny_llama.LENGTH)
        ref, logits = plain["logits"][:, chunk], result["context_parallel"]["logits"]
        assert relative(ref, logits) <= TOL, f"rank {rank}: {relative(ref, logits):.3g}"


def test_positions_counted_from_the_chunk_would_rotate_rank_1_differently(ranks, plain):
    # rank 0's chunk starts at global index 0: its own count is the global one
    first, second = (r["context_parallel_local"] for r in ranks)
    chunk = context_parallel.chunk_of(1, WORLD, tiny_llama.LENGTH)
    assert_same_bits(plain["layers"][0]["k"][:, :, context_parallel.chunk_of(0, WORLD, tiny_llama.LENGTH)],
                     first["layers"][0]["k"], "rank 0, layer 0, k")
    # rank 1: the same keys before the rotation, other ones after it, and other logits
    ref = plain["layers"][0]
    assert_same_bits(ref["k_in"][:, :, chunk], second["layers"][0]["k_in"], "rank 1, layer 0, k_in")
    assert not torch.equal(ref["k"][:, :, chunk], second["layers"][0]["k"])
    assert relative(plain["logits"][:, chunk], second["logits"]) > 1000 * TOL
