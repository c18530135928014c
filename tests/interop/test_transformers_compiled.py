"""A patched transformers model under ``torch.compile``: no graph break from
pyrope, pyrope's ops in the graph, and the eager logits.

Tiny random-weight Llama, Qwen2 and Gemma 3 (sliding and full layers with
different ropes) as in test_transformers_patch.py. ``fullgraph=True`` makes
any graph break an error; a backend that records the graphs checks that the
rotations are ``pyrope::apply_qk`` nodes, one per layer. Compiled with
``aot_eager`` (torch's tracing and functionalisation, torch's own kernels)
the logits are bit-identical to the eager patched model's, so pyrope adds
nothing under tracing; Inductor fuses and reorders the model's other float32
arithmetic, so its logits are compared within ``TOL`` of the largest logit
(the same bound as the eager patch test: the unpatched model moves as much
under Inductor), and so are those of a compiled ``generate`` with a static
cache, whose decode step moves the unpatched model's logits as much."""
import pytest

from hf_families import SMALL
from hf_peer import torch_and_transformers

torch, transformers = torch_and_transformers("the compiled transformers patch test")
from pyrope.integrations.transformers import patch  # noqa: E402  (needs torch)

TOL = 2.0 ** -17
BASE = {**SMALL, "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
        "initializer_range": 0.3, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
CASES = {
    "llama": ("llama", {}),
    "qwen2": ("qwen2", {"rope_theta": 1000000.0}),
    "gemma3": ("gemma3_text", {"head_dim": 16, "num_hidden_layers": 3, "sliding_window_pattern": 3,
                               "sliding_window": 64, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                               "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    torch.set_num_threads(previous)


def build(case):
    model_type, keys = CASES[case]
    config = transformers.AutoConfig.for_model(model_type, **{**BASE, **keys})
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def batch():
    ids = torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0   # left padding
    ids[1, :4] = 0
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


class Recorder:
    """A torch.compile backend: records each graph, runs it as aot_eager would."""

    def __init__(self):
        self.graphs = []

    def __deepcopy__(self, memo):   # transformers deep-copies its CompileConfig: keep one record
        return self

    def __call__(self, gm, inputs, **options):   # options (transformers passes mode=): none apply
        from torch._dynamo.backends.common import aot_autograd

        def keep(graph, _):
            self.graphs.append(graph)
            return graph.forward
        return aot_autograd(fw_compiler=keep)(gm, inputs)

    def count(self, target):
        return sum(1 for g in self.graphs for n in g.graph.nodes if n.op == "call_function" and target in str(n.target))


def relative(a, b):
    return float((a - b).abs().max()) / max(float(a.abs().max()), 1.0)


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_compiles_without_a_break_and_gives_the_eager_logits(case):
    model = build(case)
    inputs = batch()
    with patch(model), torch.no_grad():
        eager = model(**inputs).logits
        counters = torch._dynamo.utils.counters
        counters.clear()
        recorder = Recorder()
        traced = torch.compile(model, fullgraph=True, backend=recorder)(**inputs).logits
        assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
        assert torch.equal(traced, eager)
        assert recorder.count("pyrope.apply_qk") == model.config.num_hidden_layers
        if case == "llama":   # Inductor's code generation: seconds a model, so one model
            torch._dynamo.reset()
            fused = torch.compile(model, fullgraph=True)(**inputs).logits
            assert relative(eager, fused) <= TOL


@pytest.mark.parametrize("case", list(CASES))
def test_generate_with_a_static_cache_compiles_as_unpatched_and_gives_the_eager_tokens(case):
    model = build(case)
    inputs = batch()
    del inputs["position_ids"]   # generate derives them from the mask
    settings = dict(max_new_tokens=6, do_sample=False, cache_implementation="static", output_logits=True,
                    return_dict_in_generate=True, pad_token_id=0)
    counters = torch._dynamo.utils.counters

    def compile_config(recorder):
        config = transformers.CompileConfig(fullgraph=True, backend=recorder)
        config._compile_all_devices = True   # transformers compiles on CUDA only unless told
        return config

    counters.clear()
    with torch.no_grad():   # how often transformers itself compiles the step (Gemma 3's sliding layers: twice)
        model.generate(**inputs, compile_config=compile_config(Recorder()), **settings)
    unpatched_graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    with patch(model) as p, torch.no_grad():
        eager = model.generate(**inputs, disable_compile=True, **settings)
        assert p.calls > 0
        recorder = Recorder()
        counters.clear()
        traced = model.generate(**inputs, compile_config=compile_config(recorder), **settings)
    assert not counters["graph_break"]
    assert counters["stats"]["unique_graphs"] == unpatched_graphs   # pyrope adds no recompilation
    assert recorder.count("pyrope.apply_qk") == unpatched_graphs * model.config.num_hidden_layers
    assert torch.equal(traced.sequences, eager.sequences)
    # the compiled decode step (the static cache's index_copy_ and masks, functionalised)
    # moves transformers' own logits by up to 7e-6 unpatched: within TOL, not bit for bit
    assert relative(torch.stack(eager.logits), torch.stack(traced.logits)) <= TOL
