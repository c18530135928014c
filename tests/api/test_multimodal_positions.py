"""``multimodal_positions`` against transformers' own Qwen2-VL ``get_rope_index``.

A tiny ``Qwen2VLModel`` (spatial_merge_size 2) is built from a config, and its
``get_rope_index`` is called the way the model calls it: ``input_ids`` with
the image/video token ids, ``mm_token_type_ids`` (0 text, 1 image, 2 video)
and ``image_grid_thw``/``video_grid_thw`` rows before the spatial merge,
``(t, h * 2, w * 2)``. The full ``[3, n]`` positions must be equal, and
``next_position`` must be ``rope_deltas + n``, the first position the
model's ``compute_3d_position_ids`` gives a decoded token.
"""

import numpy as np
import pytest

from hf_peer import torch_and_transformers

import pyrope
from pyrope.positions import multimodal_positions

MERGE = 2                      # spatial_merge_size of the tiny model
IMAGE_ID, VIDEO_ID = 60, 61    # token ids the tiny config assigns
TYPE_IDS = {"text": 0, "image": 1, "video": 2}


@pytest.fixture(scope="module")
def qwen2vl():
    """(torch, a tiny Qwen2VLModel), or a failure saying how to install them."""
    torch, transformers = torch_and_transformers("the Qwen2-VL comparison")
    transformers.logging.set_verbosity_error()  # the tiny vocabulary does not hold the real bos/eos ids
    config = transformers.Qwen2VLConfig(
        text_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=64,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}),
        vision_config=dict(depth=1, embed_dim=16, hidden_size=16, num_heads=2, spatial_merge_size=MERGE),
        image_token_id=IMAGE_ID, video_token_id=VIDEO_ID)
    model = transformers.Qwen2VLModel(config).eval()
    assert model.config.vision_config.spatial_merge_size == MERGE
    return torch, model


def hf_inputs(torch, segments, rng):
    """The model inputs of a segment list: ids, token types and pre-merge grids."""
    ids, types, grids = [], [], {"image": [], "video": []}
    for kind, *sizes in segments:
        if kind == "text":
            ids += rng.integers(1, 50, sizes[0]).tolist()
            types += [0] * sizes[0]
        else:
            t, h, w = sizes
            ids += [IMAGE_ID if kind == "image" else VIDEO_ID] * (t * h * w)
            types += [TYPE_IDS[kind]] * (t * h * w)
            grids[kind].append([t, h * MERGE, w * MERGE])
    grid = {k: torch.tensor(v, dtype=torch.long) if v else None for k, v in grids.items()}
    return dict(input_ids=torch.tensor([ids], dtype=torch.long),
                mm_token_type_ids=torch.tensor([types], dtype=torch.int),
                image_grid_thw=grid["image"], video_grid_thw=grid["video"])


def hf_rope_index(qwen2vl, segments, rng):
    """transformers' ([3, n] positions, rope_delta) of one sequence."""
    torch, model = qwen2vl
    position_ids, deltas = model.get_rope_index(**hf_inputs(torch, segments, rng))
    assert position_ids.shape[:2] == (3, 1) and deltas.shape == (1, 1)
    return position_ids[:, 0].numpy(), int(deltas[0, 0])


class _Cache:
    """What compute_3d_position_ids asks of a KV cache: its length."""

    def __init__(self, length):
        self.length = length

    def get_seq_length(self):
        return self.length


def hf_decode_positions(qwen2vl, segments, rng, steps=3):
    """The [3, steps] positions the model gives the tokens decoded after the prompt."""
    torch, model = qwen2vl
    inputs = hf_inputs(torch, segments, rng)
    n = inputs["input_ids"].shape[1]
    hidden = model.config.text_config.hidden_size
    model.rope_deltas = None
    # prefill: computes and stores rope_deltas, as in generate()
    prefill = model.compute_3d_position_ids(inputs_embeds=torch.zeros(1, n, hidden), **inputs)
    assert prefill is not None
    decode = model.compute_3d_position_ids(input_ids=None, inputs_embeds=torch.zeros(1, steps, hidden),
                                           cache=_Cache(n))
    return decode[:, 0].numpy()


def random_segments(rng, n_segments, kinds=("text", "image", "video"), big_t=False):
    """A random layout with text between any two vision segments of the same kind
    (real prompts always have <|vision_start|>/<|vision_end|> between them)."""
    segments = []
    for _ in range(n_segments):
        kind = str(rng.choice(kinds))
        if segments and kind == segments[-1][0] != "text":
            segments.append(("text", int(rng.integers(1, 4))))
        if kind == "text":
            segments.append(("text", int(rng.integers(1, 9))))
        else:
            t = int(rng.integers(1, 9 if big_t else 4)) if kind == "video" or big_t else 1
            segments.append((kind, t, int(rng.integers(1, 6)), int(rng.integers(1, 6))))
    return segments


NAMED = {
    "issue-example": [("text", 5), ("image", 1, 3, 4), ("text", 3)],
    "text-only": [("text", 7)],
    "one-text-token": [("text", 1)],
    "image-only": [("image", 1, 4, 3)],
    "image-1x1": [("image", 1, 1, 1)],
    "image-at-start": [("image", 1, 2, 5), ("text", 4)],
    "image-at-end": [("text", 4), ("image", 1, 5, 2)],
    "several-images": [("text", 2), ("image", 1, 2, 3), ("text", 1), ("image", 1, 4, 4), ("text", 3),
                       ("image", 1, 1, 6), ("text", 2)],
    "image-t3": [("text", 2), ("image", 3, 2, 4), ("text", 2)],
    "image-t-past-h-w": [("text", 2), ("image", 5, 1, 2), ("text", 3)],
    "image-t-past-h-w-at-end": [("text", 2), ("image", 6, 2, 1)],
    "video": [("text", 3), ("video", 4, 2, 3), ("text", 2)],
    "video-only-long-t": [("video", 7, 2, 2)],
    "image-then-video-adjacent": [("text", 1), ("image", 1, 3, 3), ("video", 2, 2, 2), ("text", 1)],
    "video-then-image-adjacent": [("video", 3, 1, 2), ("image", 1, 2, 2)],
}
RANDOM = {f"random-{seed}": random_segments(np.random.default_rng(seed), n_segments=3 + seed % 6,
                                            big_t=seed % 3 == 0)
          for seed in range(24)}
RANDOM.update({f"random-images-{seed}": random_segments(np.random.default_rng(100 + seed), 5, ("text", "image"))
               for seed in range(6)})
CASES = {**NAMED, **RANDOM}


@pytest.mark.parametrize("segments", list(CASES.values()), ids=list(CASES))
def test_positions_and_next_position_match_transformers(qwen2vl, segments, rng):
    positions, next_position = multimodal_positions(segments)
    want, delta = hf_rope_index(qwen2vl, segments, rng)
    n = want.shape[1]
    assert positions.dtype == np.int64 and positions.shape == (3, n)
    np.testing.assert_array_equal(positions, want)
    assert next_position == delta + n
    assert isinstance(next_position, int)


@pytest.mark.parametrize("name", ["issue-example", "image-at-end", "image-t-past-h-w", "image-t-past-h-w-at-end",
                                  "video", "random-3", "random-7"])
def test_decode_continues_where_transformers_does(qwen2vl, name, rng):
    segments = CASES[name]
    _, next_position = multimodal_positions(segments)
    decode = hf_decode_positions(qwen2vl, segments, rng, steps=3)
    want = np.arange(next_position, next_position + 3)
    np.testing.assert_array_equal(decode, np.stack([want] * 3))


def test_readable_example():
    positions, next_position = multimodal_positions([("text", 2), ("image", 1, 2, 3), ("text", 2)])
    assert positions.tolist() == [[0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
                                  [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
                                  [0, 1, 2, 3, 4, 2, 3, 4, 5, 6]]
    assert next_position == 7


@pytest.mark.parametrize("t, h, w", [(1, 3, 7), (1, 7, 3), (1, 4, 4), (2, 5, 1), (9, 2, 3)])
def test_text_after_an_image_starts_past_its_largest_spatial_grid_size(t, h, w):
    positions, next_position = multimodal_positions([("text", 5), ("image", t, h, w), ("text", 3)])
    after = positions[:, 5 + t * h * w:]
    assert after.tolist() == [[5 + max(h, w) + i for i in range(3)]] * 3
    # decode continues past every position: past the text, or past the last frame when t is larger
    assert next_position == max(5 + max(h, w) + 3, 5 + t)


def test_adjacent_images_are_placed_in_turn(qwen2vl, rng):
    """transformers groups consecutive image tokens and fails on two images with
    nothing between them; pyrope places the second where the first ends."""
    a, b = ("image", 1, 2, 3), ("image", 2, 3, 1)
    positions, next_position = multimodal_positions([("text", 2), a, b])
    first, _ = multimodal_positions([a])
    second, _ = multimodal_positions([b])
    np.testing.assert_array_equal(positions, np.concatenate([np.stack([np.arange(2)] * 3), first + 2, second + 2 + 3], axis=1))
    assert next_position == 2 + 3 + 3
    with pytest.raises(RuntimeError):
        hf_rope_index(qwen2vl, [("text", 2), a, b], rng)


def test_exported_and_empty():
    assert pyrope.multimodal_positions is multimodal_positions
    assert "multimodal_positions" in pyrope.__all__
    positions, next_position = multimodal_positions([])
    assert positions.shape == (3, 0) and positions.dtype == np.int64 and next_position == 0
    # any iterable of tuples or lists; numpy integers as sizes
    got, nxt = multimodal_positions(iter([["text", np.int64(2)], ("image", np.int32(1), 2, np.uint8(2))]))
    want, want_next = multimodal_positions([("text", 2), ("image", 1, 2, 2)])
    np.testing.assert_array_equal(got, want)
    assert nxt == want_next


BAD = [
    ([("text", 3), ("audio", 4)], ValueError, r"segments\[1\] must start with a kind in .*'audio'"),
    ([("Text", 3)], ValueError, r"segments\[0\] must start with a kind.*'Text'"),
    ([(3, "text")], ValueError, r"segments\[0\] must start with a kind.*\(3, 'text'\)"),
    ([("text", 2), ()], ValueError, r"segments\[1\] must be .*empty tuple"),
    ([("text", 0)], ValueError, r"segments\[0\] size n must be positive, got 0 in \('text', 0\)"),
    ([("text", 2), ("image", 1, 0, 2)], ValueError, r"segments\[1\] size h must be positive, got 0 in \('image', 1, 0, 2\)"),
    ([("video", -1, 2, 2)], ValueError, r"segments\[0\] size t must be positive, got -1"),
    ([("image", 1, 2, 2), ("text", 2), ("image", 1, 2, -3)], ValueError, r"segments\[2\] size w must be positive"),
    ([("text", 2, 3)], ValueError, r"segments\[0\] must be \('text', n\) \(2 items\), got 3 items: \('text', 2, 3\)"),
    ([("text",)], ValueError, r"segments\[0\] must be \('text', n\)"),
    ([("image", 2, 2)], ValueError, r"segments\[0\] must be \('image', t, h, w\) \(4 items\), got 3 items"),
    ([("text", 1), ("video", 1, 2, 2, 2)], ValueError, r"segments\[1\] must be \('video', t, h, w\).*got 5 items"),
    ([("text", True)], TypeError, r"segments\[0\] size n must be an integer, got a bool in \('text', True\)"),
    ([("image", 1, np.True_, 2)], TypeError, r"segments\[0\] size h must be an integer, got a bool"),
    ([("text", 2.0)], TypeError, r"segments\[0\] size n must be an integer, got float 2.0 in \('text', 2.0\)"),
    ([("image", 1, 2, np.float32(2))], TypeError, r"segments\[0\] size w must be an integer, got float32"),
    ([("text", "3")], TypeError, r"segments\[0\] size n must be an integer, got str '3'"),
    ([("text", None)], TypeError, r"segments\[0\] size n must be an integer, got NoneType"),
    ([("text", 2), "text"], TypeError, r"segments\[1\] must be a tuple .*got str 'text'"),
    ([("text", 2), 5], TypeError, r"segments\[1\] must be a tuple .*got int 5"),
    ("text", TypeError, r"segments must be a sequence .*got str 'text'"),
    (5, TypeError, r"segments must be a sequence .*got int 5"),
    ([("text", 1), ("image", 1, 1, 2**31)], ValueError, r"segments\[1\] .* places positions up to 2147483648, "
                                                        r"past 2147483647"),
    ([("text", 2**31 + 1)], ValueError, r"segments\[0\] \('text', 2147483649\) places positions up to 2147483648"),
]


@pytest.mark.parametrize("segments, error, match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_segments(segments, error, match):
    with pytest.raises(error, match=match) as info:
        multimodal_positions(segments)
    assert isinstance(info.value, pyrope.RopeError)

