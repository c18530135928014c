"""pyrope.check.sanity: passes for correct ropes, and each check can fail."""
import numpy as np
import pytest

import pyrope
from pyrope._ops.explicit import explicit_rope
from pyrope.check import SanityError, sanity
from pyrope import Rope
from pyrope.cli import main


@pytest.mark.parametrize("rope", [
    pyrope.Rope(64, layout="split_half"),
    pyrope.Rope(64, layout="interleaved", rotary_dim=40, base=500000.0),
    explicit_rope(pyrope.Rope, 32, layout="split_half", inv_freq=np.geomspace(1, 1e-4, 16), attention_factor=1.3),
], ids=["split_half", "partial", "factor"])
def test_correct_ropes_pass(rope):
    report = sanity(rope)
    assert report.ok, str(report)
    assert [r.name for r in report.results] == ["rule", "norm", "relative", "inverse", "table"]
    assert "result: OK" in str(report)
    report.raise_if_failed()


class Float32AngleRope(pyrope.Rope):
    """A common backend bug: the angle position * w formed in float32."""

    __slots__ = ()

    def apply(self, x, positions=None, *, offset=0, seq_axis=-3, out=None, inverse=False):
        pos = np.asarray(positions)
        ang = (pos.astype(np.float32)[:, None] * self.inv_freq.astype(np.float32)).astype(np.float64)
        x64 = np.asarray(x, np.float64)
        h = self.rotary_dim // 2
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        if inverse:
            s = -s
        y = x64.copy()
        y[..., :h] = x64[..., :h] * c - x64[..., h:2 * h] * s
        y[..., h:2 * h] = x64[..., :h] * s + x64[..., h:2 * h] * c
        return y.astype(np.float32)


def test_float32_angles_fail_rule_and_relative():
    report = sanity(Float32AngleRope(32, layout="split_half"))
    failed = {r.name for r in report.failed()}
    assert {"rule", "relative"} <= failed, str(report)
    assert "worst at" in report["relative"].detail
    with pytest.raises(SanityError, match="result: FAIL"):
        report.raise_if_failed()


class NotNormPreserving(pyrope.Rope):
    __slots__ = ()

    def apply(self, x, *args, **kwargs):
        return super().apply(x, *args, **kwargs) * np.float32(1.001)


def test_scaled_rotation_fails_norm_and_inverse():
    failed = {r.name for r in sanity(NotNormPreserving(16, layout="interleaved")).failed()}
    assert {"norm", "inverse", "rule"} <= failed


def test_backend_with_wrong_frequencies_fails(rng):
    rope = pyrope.Rope(16, layout="split_half")
    other = pyrope.Rope(16, layout="split_half", base=10001.0)
    assert sanity(rope, rotate=rope.apply)["backend"].passed
    assert not sanity(rope, rotate=other.apply)["backend"].passed


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(weights_layout="neox"), ValueError, "weights_layout must be"),
    (dict(rotate=3), TypeError, "rotate must be callable"),
    (dict(q=np.zeros((2, 5))), ValueError, "q must be finite vectors"),
    (dict(wq=np.zeros((16, 4))), ValueError, "wq, wk, num_heads and num_kv_heads"),
    (dict(wq=np.zeros((15, 4)), wk=np.zeros((16, 4)), num_heads=1, num_kv_heads=1), ValueError, "wq must be"),
])
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        sanity(pyrope.Rope(16, layout="split_half"), **kwargs)
    with pytest.raises(TypeError, match="rope must be"):
        sanity("rope")


def test_cli_check(capsys):
    assert main(["check", "--head-dim", "64", "--layout", "interleaved", "--rotary-dim", "32"]) == 0
    out = capsys.readouterr().out
    assert "pyrope sanity check" in out and "result: OK" in out and "rotary_dim=32" in out
    assert main(["check", "--head-dim", "63", "--layout", "interleaved"]) == 2
    assert "head_dim must be a positive even" in capsys.readouterr().err
    assert main(["check", "--layout", "interleaved"]) == 2
    assert "pass --head-dim and --layout" in capsys.readouterr().err


def test_cli_check_with_harness_and_config(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": 256, "num_attention_heads": 8, "rope_theta": 500000.0, '
                   '"max_position_embeddings": 8192, "partial_rotary_factor": 0.5}')
    assert main(["check", "--config", str(cfg), "--harness"]) == 0
    out = capsys.readouterr().out
    assert "rotary_dim=16" in out and "consistency harness" in out
    assert out.count(": OK (max relative error") == 9


def test_table_check_catches_float32_angles(monkeypatch):
    # A table built the common way (float32 angle) is off by many ulps at 2**31 - 1.
    from pyrope import check as check_module

    def float32_angle_tables(self, positions):
        pos = np.asarray(positions, dtype=np.float32)
        ang = pos[..., None] * self.inv_freq.astype(np.float32)
        return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)

    rope = Rope(64, layout="split_half")
    monkeypatch.setattr(Rope, "cos_sin", float32_angle_tables)
    result = check_module._check_table(rope, (4096, 2**31 - 1))
    assert not result.passed and result.ratio > 100


def test_progress_callback_sees_every_check():
    calls = []
    report = sanity(Rope(16, layout="interleaved"), progress=lambda *a: calls.append(a))
    assert [c[2] for c in calls] == [r.name for r in report.results]
    assert calls[-1][0] == calls[-1][1] == len(report.results)
