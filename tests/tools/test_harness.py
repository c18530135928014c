"""The consistency harness: correct execution paths agree with prefill, and
each failure the second seed describes is caught, located and explained."""
import numpy as np
import pytest

import pyrope
from pyrope.testing import FingerprintMismatch, Harness, PrefixStore, audit_keys, fingerprint_of

LAYOUTS = ["split_half", "interleaved"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_correct_paths_agree(layout, dtype):
    h = Harness(pyrope.Rope(16, layout=layout, rotary_dim=12), dtype=dtype, n_layers=2, n_heads=4, n_kv_heads=2)
    results = h.check()
    assert len(results) == 9
    assert all(c.ok for c in results), "\n".join(map(str, results))
    assert max(c.error for c in results) < h.tolerance / 4


def test_harness_itself_can_see_a_difference():
    """A different rule in the run than in the reference must not pass (the harness is not blind)."""
    h = Harness(pyrope.Rope(16, layout="split_half"))
    other = pyrope.Rope(16, layout="split_half", base=10001.0)
    t = h.tokens(12)
    c = h.compare(h.prefill(t), h.decode(t, rotate=lambda x, p: other.apply(x, positions=p)))
    assert not c.ok and c.where == "layer 0"


def test_decode_at_an_offset_and_uneven_chunks():
    h = Harness(pyrope.Rope(16, layout="interleaved"), n_layers=3, n_heads=6, n_kv_heads=3)
    t = h.tokens(17, seed=5)
    ref = h.prefill(t, start=1000)
    assert h.compare(ref, h.run(t, chunks=[5, 1, 1, 7, 3], start=1000)).ok
    assert h.compare(ref, h.paged(t, block_size=3, chunks=[2, 9, 6], start=1000, seed=3)).ok


def test_paged_blocks_really_are_shuffled():
    h = Harness(pyrope.Rope(16, layout="split_half"))
    cache = h.new_cache(paged=True, block_size=4, n_blocks=8, seed=1)
    slots = cache.reserve(np.arange(12))
    assert sorted(cache.block_table) != cache.block_table or cache.block_table[0] != 0
    assert not np.array_equal(slots, np.arange(12))


def test_chunks_restarting_at_zero_are_caught():
    h = Harness(pyrope.Rope(16, layout="split_half"))
    t = h.tokens(20)
    c = h.compare(h.prefill(t), h.chunked(t, 4, positions_fn=lambda index, n, slots: np.arange(n)))
    assert not c.ok
    assert (c.where, c.position) == ("layer 0", 4)          # first token of the second chunk
    assert "token 4 (position 4) was rotated as position 0" in c.reason
    assert "restarted at 0" in c.reason


def test_keys_rotated_twice_are_caught():
    rope = pyrope.Rope(16, layout="interleaved")
    h = Harness(rope)
    t = h.tokens(10)
    run = h.decode(t, write_keys=lambda k, p: rope.apply(k, positions=p))   # the cache write rotates again
    c = h.compare(h.prefill(t), run)
    assert not c.ok and (c.where, c.position) == ("layer 0", 1)   # position 0 turns by 0: harmless there
    assert c.reason.startswith("keys rotated twice")
    audit = audit_keys(rope, h.model, run.tokens, run.cached_keys)
    assert audit.applied_positions == {n: 2 * n for n in range(1, 10)}


def test_paged_slot_used_as_position_is_caught():
    h = Harness(pyrope.Rope(16, layout="split_half"))
    t = h.tokens(12)
    c = h.compare(h.prefill(t), h.paged(t, positions_fn=lambda index, n, slots: slots))
    assert not c.ok and c.where == "layer 0"
    assert "rotated at the wrong positions" in c.reason


def switching_decode(h, old, new, t, switch, convert=False):
    """Decode with rule ``old`` before sequence index ``switch`` and ``new`` after (dynamic NTK style)."""
    def rotate(x, p):
        return (old if p[0] < switch else new).apply(x, positions=p)

    def before_chunk(cache, index):
        if convert and index == switch:
            for layer in range(h.model.n_layers):
                k32 = cache.k[layer, :index].astype(np.float32)
                cache.k[layer, :index] = old.convert_keys(k32, np.arange(index), new)

    return h.decode(t, rotate=rotate, before_chunk=before_chunk)


def test_mid_sequence_frequency_change_phase_error():
    old = pyrope.Rope(16, layout="split_half", base=10000.0)
    new = pyrope.Rope(16, layout="split_half", base=40000.0)     # NTK-style base growth: w_0 unchanged
    t, switch = Harness(new).tokens(24), 12
    # Against the old rule: correct up to the switch, wrong from the switch on.
    h_old = Harness(old)
    c = h_old.compare(h_old.prefill(t), switching_decode(h_old, old, new, t, switch))
    assert not c.ok and (c.where, c.position) == ("layer 0", switch)
    assert "frequency rule mismatch" in c.reason
    # Against a fixed new rule: the cached old keys carry phase error n * (w_old - w_new).
    h_new = Harness(new)
    run = switching_decode(h_new, old, new, t, switch)
    c = h_new.compare(h_new.prefill(t), run, first=switch)
    assert not c.ok and (c.where, c.position) == ("layer 0", switch)
    assert "n * (w_old - w_new)" in c.reason
    audit = audit_keys(new, h_new.model, run.tokens, run.cached_keys)
    assert audit.bad_tokens == list(range(1, switch))
    np.testing.assert_allclose(audit.delta_freq, old.inv_freq - new.inv_freq, rtol=0, atol=1e-5)


def test_frequency_audit_past_half_a_turn_of_phase_error():
    """Late switch: phase errors n * dw beyond pi still give the right dw."""
    old = pyrope.Rope(16, layout="interleaved", base=10000.0)
    new = pyrope.Rope(16, layout="interleaved", base=160000.0)
    h = Harness(old, n_layers=1)
    t, switch = h.tokens(64), 48
    run = switching_decode(h, old, new, t, switch)
    audit = audit_keys(old, h.model, run.tokens, run.cached_keys)
    assert audit.bad_tokens == list(range(switch, 64))
    assert np.max(np.abs(switch * (new.inv_freq - old.inv_freq))) > np.pi
    np.testing.assert_allclose(audit.delta_freq, new.inv_freq - old.inv_freq, rtol=0, atol=1e-5)


def test_convert_keys_fixes_layer_zero_not_later_layers():
    """The seed's point: re-rotating cached keys repairs this layer's keys, not hidden states."""
    old = pyrope.Rope(16, layout="split_half", base=10000.0)
    new = pyrope.Rope(16, layout="split_half", base=40000.0)
    h = Harness(new, n_layers=3)
    t, switch = h.tokens(24), 12
    run = switching_decode(h, old, new, t, switch, convert=True)
    assert audit_keys(new, h.model, run.tokens, run.cached_keys).ok        # layer-0 keys now exact
    # Converted keys are two float32 roundings from directly rotated ones (~1e-7 relative),
    # so compare at 1e-6 instead of the float64 default; layer 1 is off by ~4e-2.
    c = h.compare(h.prefill(t), run, first=switch, tolerance=1e-6)
    assert not c.ok and (c.where, c.position) == ("layer 1", switch)     # layer 0 agrees, layer 1 does not
    assert "layer-0 cached keys are right" in c.reason
    # A single-layer model has nothing computed under the old rule past its keys: fully repaired.
    h1 = Harness(new, n_layers=1)
    assert h1.compare(h1.prefill(t), switching_decode(h1, old, new, t, switch, convert=True), first=switch,
                      tolerance=1e-6).ok


def test_prefix_reuse_under_another_fingerprint():
    rope_a = pyrope.Rope(16, layout="split_half", base=10000.0)
    rope_b = pyrope.Rope(16, layout="split_half", base=10000.0 * 4 ** (16 / 14))   # a static NTK rule
    ha, hb = Harness(rope_a), Harness(rope_b)
    assert ha.model.fingerprint == hb.model.fingerprint and ha.fingerprint != hb.fingerprint
    t, n_prefix = ha.tokens(20), 8
    store = PrefixStore()
    cache = ha.new_cache()
    ha.run(t[:n_prefix], chunks=4, cache=cache)
    store.save(cache)
    # Same rule: reuse is allowed and exact.
    reused = ha.run(t[n_prefix:], cache=store.load(t[:n_prefix], rope_fingerprint=ha.fingerprint,
                                                   model_fingerprint=ha.model.fingerprint))
    assert ha.compare(ha.prefill(t), reused).ok
    # Another rule: the fingerprint check refuses ...
    with pytest.raises(FingerprintMismatch, match="rotated under rope .* the request uses rope"):
        store.load(t[:n_prefix], rope_fingerprint=hb.fingerprint, model_fingerprint=hb.model.fingerprint)
    # ... and forcing it past the check is caught by the harness at the first new token.
    forced = store.load(t[:n_prefix], rope_fingerprint=hb.fingerprint, model_fingerprint=hb.model.fingerprint,
                        check=False)
    c = hb.compare(hb.prefill(t), hb.run(t[n_prefix:], cache=forced))
    assert not c.ok and (c.where, c.position) == ("layer 0", n_prefix)
    assert "frequency rule mismatch" in c.reason
    other_model = Harness(rope_a, seed=1)
    with pytest.raises(FingerprintMismatch, match="belongs to model"):
        store.load(t[:n_prefix], rope_fingerprint=other_model.fingerprint,
                   model_fingerprint=other_model.model.fingerprint)
    assert store.load(t[:3], rope_fingerprint=ha.fingerprint, model_fingerprint=ha.model.fingerprint) is None


def test_fingerprint_is_stable_and_sensitive():
    a = pyrope.Rope(16, layout="split_half")
    assert fingerprint_of(a) == fingerprint_of(pyrope.Rope(16, layout="split_half"))
    for other in (pyrope.Rope(16, layout="interleaved"), pyrope.Rope(16, layout="split_half", rotary_dim=8),
                  pyrope.Rope(16, layout="split_half", base=10000.5), pyrope.Rope(18, layout="split_half")):
        assert fingerprint_of(other) != fingerprint_of(a)


def test_backend_rotation_is_what_gets_checked():
    """A backend hands in its rotation; a wrong layout there shows up in every cached path."""
    truth = pyrope.Rope(16, layout="split_half")
    wrong = pyrope.Rope(16, layout="interleaved")
    h = Harness(truth, rotate=lambda x, p: wrong.apply(x, positions=p))
    bad = [c for c in h.check() if not c.ok]
    assert bad and all(c.where == "layer 0" for c in bad)
    with pytest.raises(AssertionError, match="DIVERGES at layer 0"):
        h.assert_consistent()


@pytest.mark.parametrize("kwargs, match", [(dict(chunks=0), "positive chunk size"),
                                           (dict(chunks=[3, 3]), "summing to len\\(tokens\\)=5")])
def test_bad_chunks(kwargs, match):
    h = Harness(pyrope.Rope(8, layout="split_half"))
    with pytest.raises(ValueError, match=match):
        h.run(h.tokens(5), **kwargs)


def test_readme_backend_section_runs():
    """The README's backend examples are executable as written."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("## Using pyrope in an inference backend"):]
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.S))
    assert "onnx_rotary_embedding" in code and "apply_varlen" in code and "fingerprint" in code
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["y"].shape == (1, 8, 10, 64)
    assert namespace["report"].ok, str(namespace["report"])


def test_wrong_partial_rotary_convention_is_caught():
    """Model trained with 'proportional' partial rotary, backend rotating the 'prefix' way."""
    from pyrope.check import sanity
    from pyrope.positions import PartialRotary
    model_rope = PartialRotary(32, 16, convention="proportional", layout="split_half").rope
    backend = PartialRotary(32, 16, convention="prefix", layout="split_half")
    h = Harness(model_rope, rotate=lambda x, p: backend.apply(x, positions=p))
    bad = [c for c in h.check() if not c.ok]
    assert bad and {c.where for c in bad} == {"layer 0"}
    assert not sanity(model_rope, rotate=backend.apply)["backend"].passed
    right = PartialRotary(32, 16, convention="proportional", layout="split_half")
    assert all(c.ok for c in Harness(model_rope, rotate=lambda x, p: right.apply(x, positions=p)).check())


def test_paged_prefix_copies_are_independent():
    h = Harness(pyrope.Rope(16, layout="split_half"))
    t = h.tokens(14)
    cache = h.new_cache(paged=True, block_size=4, n_blocks=8, seed=2)
    h.run(t[:6], chunks=3, cache=cache)
    store = PrefixStore()
    store.save(cache)
    kw = dict(rope_fingerprint=h.fingerprint, model_fingerprint=h.model.fingerprint)
    first = h.run(t[6:], cache=store.load(t[:6], **kw))
    second = h.run(t[6:], cache=store.load(t[:6], **kw))       # the store's copy was not consumed
    ref = h.prefill(t)
    assert h.compare(ref, first).ok and h.compare(ref, second).ok
    assert cache.length == 6 and len(cache.block_table) == 2
