"""Layout conversion of projection weights: the seed's permutation identity,
GQA weights/biases/norms, round trips, and detection of a mixed-up pair."""
import numpy as np
import pytest

import pyrope
from pyrope.check import sanity
from pyrope.layout import convert_attention, convert_heads, permutation, permute_rows


def hf_permute(w, n_heads, dim1, dim2):
    """The Meta -> HF conversion from transformers' convert_llama_weights_to_hf (numpy port)."""
    return w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(0, 2, 1, 3).reshape(dim1, dim2)


def scores(rope, q, k, m, n):
    """q [hq, d], k [hk, d] with GQA groups: score of each query head against its kv head."""
    group = q.shape[0] // k.shape[0]
    rq = rope.apply(q[None], positions=[m]).astype(np.float64)[0]
    rk = rope.apply(k[None], positions=[n]).astype(np.float64)[0]
    return np.einsum("hd,hd->h", rq, np.repeat(rk, group, axis=0))


def test_permutation_pairs_keep_their_frequency():
    p = permutation(8, "interleaved", "split_half")
    assert p.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    back = permutation(8, "split_half", "interleaved")
    assert p[back].tolist() == list(range(8))
    assert permutation(10, "interleaved", "split_half", rotary_dim=4).tolist() == [0, 2, 1, 3, 4, 5, 6, 7, 8, 9]
    assert permutation(6, "split_half", "split_half").tolist() == list(range(6))


def test_matches_transformers_meta_to_hf_permute(rng):
    n_heads, d, hidden = 4, 16, 24
    w = rng.standard_normal((n_heads * d, hidden))
    np.testing.assert_array_equal(permute_rows(w, n_heads, d, "interleaved", "split_half"),
                                  hf_permute(w, n_heads, n_heads * d, hidden))


@pytest.mark.parametrize("from_layout, to_layout", [("interleaved", "split_half"), ("split_half", "interleaved")])
@pytest.mark.parametrize("rotary_dim", [32, 20])
def test_seed_identity_scores_unchanged(rng, from_layout, to_layout, rotary_dim):
    """(R'_m P q)^T (R'_n P k) == (R_m q)^T (R_n k), through real GQA projections."""
    hq, hk, d, hidden = 4, 2, 32, 48
    w = dict(wq=rng.standard_normal((hq * d, hidden)), wk=rng.standard_normal((hk * d, hidden)),
             bq=rng.standard_normal(hq * d), bk=rng.standard_normal(hk * d),
             q_norm=rng.uniform(0.5, 2, d), k_norm=rng.uniform(0.5, 2, hk * d))
    conv = convert_attention(num_heads=hq, num_kv_heads=hk, head_dim=d, from_layout=from_layout,
                             to_layout=to_layout, rotary_dim=rotary_dim, **w)
    r_from = pyrope.Rope(d, layout=from_layout, rotary_dim=rotary_dim)
    r_to = pyrope.Rope(d, layout=to_layout, rotary_dim=rotary_dim)
    h = rng.standard_normal(hidden)

    def project(ws, wname, bname, norm, heads):
        x = (ws[wname] @ h + ws[bname]).reshape(heads, d)
        x = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True))  # per-head RMSNorm
        return (x * ws[norm].reshape(-1, d)).astype(np.float32)

    q0, k0 = project(w, "wq", "bq", "q_norm", hq), project(w, "wk", "bk", "k_norm", hk)
    q1, k1 = project(conv, "wq", "bq", "q_norm", hq), project(conv, "wk", "bk", "k_norm", hk)
    for m, n in ((0, 0), (7, 3), (5000, 12), (2**30, 2**30 - 9)):
        want = scores(r_from, q0, k0, m, n)
        got = scores(r_to, q1, k1, m, n)
        scale = np.linalg.norm(q0, axis=-1) * np.repeat(np.linalg.norm(k0, axis=-1), 2)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.max(scale))
        # the mixed-up pair (converted weights, old kernel) gives different scores
        wrong = scores(r_from, q1, k1, m, n)
        if (m, n) != (0, 0):
            assert np.max(np.abs(wrong - want)) > 1e-2 * np.max(scale)


def test_round_trip_is_identity(rng):
    w = dict(wq=rng.standard_normal((6 * 8, 5)), bk=rng.standard_normal(2 * 8), k_norm=rng.standard_normal(8))
    there = convert_attention(num_heads=6, num_kv_heads=2, head_dim=8, from_layout="interleaved",
                              to_layout="split_half", **w)
    back = convert_attention(num_heads=6, num_kv_heads=2, head_dim=8, from_layout="split_half",
                             to_layout="interleaved", **there)
    assert set(back) == {"wq", "bk", "k_norm"}
    for name in w:
        np.testing.assert_array_equal(back[name], w[name])
    assert not np.array_equal(there["wq"], w["wq"])
    x = rng.standard_normal((3, 8))
    np.testing.assert_array_equal(convert_heads(convert_heads(x, "split_half", "interleaved"),
                                                "interleaved", "split_half"), x)


def test_mixed_weights_and_kernel_detected_by_sanity(rng):
    """Weights converted to split_half, kernel left interleaved: the check fails; matched passes."""
    hq, hk, d, hidden = 4, 2, 16, 32
    wq, wk = rng.standard_normal((hq * d, hidden)), rng.standard_normal((hk * d, hidden))
    conv = convert_attention(num_heads=hq, num_kv_heads=hk, head_dim=d, from_layout="interleaved",
                             to_layout="split_half", wq=wq, wk=wk)
    kw = dict(num_heads=hq, num_kv_heads=hk, weights_layout="split_half")
    good = sanity(pyrope.Rope(d, layout="split_half"), wq=conv["wq"], wk=conv["wk"], **kw)
    bad = sanity(pyrope.Rope(d, layout="interleaved"), wq=conv["wq"], wk=conv["wk"], **kw)
    assert good.ok, str(good)
    assert not bad.ok and [r.name for r in bad.failed()] == ["layout"]
    assert "weights are 'split_half' but the rope rotates 'interleaved'" in str(bad)
    # the same mix-up seen from a backend: contract split_half, backend kernel interleaved
    backend = pyrope.Rope(d, layout="interleaved").apply
    report = sanity(pyrope.Rope(d, layout="split_half"), wq=conv["wq"], wk=conv["wk"], num_heads=hq,
                    num_kv_heads=hk, rotate=backend)
    assert [r.name for r in report.failed()] == ["backend"]


@pytest.mark.parametrize("call, match", [
    (lambda: permute_rows(np.zeros((10, 3)), 2, 4, "interleaved", "split_half"), "num_heads \\* head_dim"),
    (lambda: permutation(8, "interleaved", "neox"), "layout must be"),
    (lambda: permutation(8, "interleaved", "split_half", rotary_dim=10), "rotary_dim must be at most"),
    (lambda: permutation(7, "interleaved", "split_half"), "head_dim must be a positive even"),
    (lambda: convert_attention(num_heads=2, num_kv_heads=1, head_dim=4, from_layout="interleaved",
                               to_layout="split_half", wk=np.zeros((8, 3))), "wk: .*wk.shape\\[0\\]"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
