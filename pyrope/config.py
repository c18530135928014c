"""Model configs (transformers ``config.json``) to Rope arguments, layouts and per-layer ropes.

``rope_arguments_from_hf_config(config)`` reads the keys that define a model's
position function and returns ``head_dim``, ``rotary_dim``, ``base`` and
``scaling`` (a rule object from :mod:`pyrope.scaling`, or ``None``), ready for
``Rope(**args, layout=...)``.  ``layout_from_hf_config`` reads the pair layout
(and where it came from), ``softmax_scale_factor_from_hf_config`` the factor a
backend multiplies its softmax scale by, and ``layer_ropes`` gives the rope of
every hidden layer (``None`` where a layer has no rotary embedding).

Both config styles are read:

* transformers 4: top-level ``rope_theta`` and ``rope_scaling`` (``type`` or
  ``rope_type``), top-level ``partial_rotary_factor`` and
  ``original_max_position_embeddings``;
* transformers 5: ``rope_parameters`` holding ``rope_theta``, ``rope_type``,
  ``partial_rotary_factor`` and the rule's keys (optionally nested by layer
  type, e.g. ``{"full_attention": {...}, "sliding_attention": {...}}``).

and the older spellings real configs still use: GPT-NeoX ``rotary_emb_base``
and ``rotary_pct`` (0.25 when absent, as ``GPTNeoXConfig``); GPT-J/CodeGen
``n_embd``, ``n_head`` and ``rotary_dim`` (64 when absent, as ``GPTJConfig``);
Gemma 3's ``rope_local_base_freq`` (the sliding layers' base) next to
``rope_theta`` and ``rope_scaling`` (the full-attention layers'); DeepSeek's
``qk_rope_head_dim``: the Rope of a multi-head latent attention (MLA) model is
the one applied to the ``qk_rope_head_dim`` slice of each query/key head, so
that is its ``head_dim`` (a ``head_dim`` key is ignored, as transformers'
DeepSeek configs overwrite it), and ``partial_rotary_factor`` may only say so
(Mistral 4 writes ``qk_rope_head_dim / (qk_nope_head_dim + qk_rope_head_dim)``).

A value given in two places must agree, else ``ValueError`` names both.
Where a family's transformers config class has its own default (``rope_theta``
of Cohere, Llama 4, gpt-oss, SmolLM3 ...; GLM's ``partial_rotary_factor`` 0.5)
the default is that class's (tables below, checked against transformers by
``tests/test_transformers_conformance.py``).

The layout (``layout_from_hf_config``): ``rope_interleave`` decides when the
config has it (true: ``"interleaved"``, false: ``"split_half"``); else the
``model_type`` (of the text config, where the text model is read) through
:data:`LAYOUT_FAMILIES`, the families whose transformers code rotates adjacent
pairs of HF weights, and the families checked split-half although a name or a
relative suggests otherwise; else ``"split_half"``.  An explicit ``layout``
wins over the table (weights converted to the other layout), but one that
contradicts ``rope_interleave`` raises ``ValueError``.
"""
from ._readers.hf_config import (DEFAULT_BASE, LAYOUT_FAMILIES, MAX_LAYERS, MROPE_FAMILIES,
                                 SOFTMAX_MSCALE_FAMILIES, layer_rope_arguments, layout_from_hf_config,
                                 load_hf_config, rope_arguments_from_hf_config, rope_layer_types,
                                 softmax_scale_factor_from_hf_config)
from .errors import RopeError
from .rope import Rope

__all__ = ["load_hf_config", "rope_arguments_from_hf_config", "layout_from_hf_config",
           "softmax_scale_factor_from_hf_config", "layer_ropes", "rope_layer_types", "DEFAULT_BASE", "MAX_LAYERS",
           "LAYOUT_FAMILIES", "SOFTMAX_MSCALE_FAMILIES"]


def layer_ropes(config, *, layout=None, seq_len=None):
    """One entry per hidden layer: the ``Rope`` of that layer, or ``None`` for a
    layer without rotary embedding.

    What each layer uses follows transformers' modeling code:

    * ``no_rope_layers`` (Llama 4, SmolLM3): 1 = rope, 0 = no rope.  Llama 4
      takes an empty or absent list as every ``no_rope_layer_interval``-th
      layer (4) without rope; SmolLM3 an absent one (an empty one is refused:
      transformers cannot index it).
    * ``layer_types`` with ``rope_parameters`` per layer type (Gemma 3/4,
      transformers 5): each layer the rope of its type; a ``None`` entry means
      that type has no rope.  Gemma 3's ``rope_theta``/``rope_scaling`` and
      ``rope_local_base_freq`` are its full and sliding layers' ropes; Gemma
      4's full-attention layers have ``global_head_dim`` (512) heads, and its
      last layer is full attention (forced, with a warning, as transformers).
      Absent ``layer_types`` are derived as the family's config class does
      (``sliding_window_pattern``).
    * Cohere 2: only sliding-window layers rotate (none when
      ``sliding_window`` is null); Cohere 2 MoE also its dense prefix layers
      when ``prefix_dense_sliding_window_pattern`` is 1.
    * ``per_layer_config`` (transformers 5): a layer's overrides (e.g. its
      ``head_dim``) apply to its rope.
    * otherwise every layer has the model's rope (gpt-oss's sliding and full
      layers share one).

    Equal layers share one ``Rope`` object.  ``layout``/``seq_len`` as in
    ``Rope.from_hf_config``.
    """
    built, out = {}, []
    for i, arguments in enumerate(layer_rope_arguments(config, layout=layout, seq_len=seq_len)):
        if arguments is not None and id(arguments) not in built:
            try:
                built[id(arguments)] = Rope._from_arguments(arguments)
            except RopeError as exc:
                raise type(exc)(f"layer {i}: {exc}") from None
        out.append(None if arguments is None else built[id(arguments)])
    return out
