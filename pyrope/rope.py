"""``Rope``: a resolved rotary position embedding and the calls that apply it.

A ``Rope`` is immutable once built: its layout, head_dim, rotary_dim,
float64 inverse frequencies and attention factor define one position function.
"""
import builtins
import copy
import dataclasses
import numpy as np

from ._engine import binding as _binding, tables as _engine_tables, paged as _paged, plan as _plan, stages as _stages
from ._engine.checks import (as_base, as_bool, as_even_dim, as_float_array, as_layout, out_pair,
                             position_bounds, positions_array, table_dtype, too_large)
from ._engine.direct import GENERAL, may_share, qk_marks
from ._engine.general import ANGLES, Job  # noqa: F401 (pyrope.rope.ANGLES)
from ._interop.edge import PASS as _PASS, Edge
from ._interop import tensor_direct as _tensor_direct
from ._interop.views import tracing as _tracing
from ._ops import rekey as _rekey, shift as _shift
from .prepared import PreparedApply, PreparedApplyQK, PreparedRotation  # noqa: F401 (pyrope.rope.PreparedRotation)
from ._readers.hf_config import hf_rope_arguments
from .contract import config_facts_from_contract, with_config_facts
from .contract import fingerprint as _fingerprint
from .contract import make_contract, resolved_from_contract, sections_from_contract
from .errors import RopeError, TypeError, ValueError
from .norm import RMSNorm, as_norm
from ._engine.sections import is_sectioned, pair_components
from ._engine.table_cache import TableCache
from .scaling import resolve

_MISSING = object()
_AUTO = "auto"   # the default, so `angles is _AUTO` decides the common case (any other object: `==` on a str)

_SMALL_TABLE = 4096   # positions whose tables cos_sin makes without reserving them first


class Rope:
    """Rotary position embedding for one attention configuration.

    ``Rope(head_dim, *, layout, base=10000.0, rotary_dim=None, scaling=None,
    mrope_section=None, mrope_interleaved=False)``

    - ``head_dim``: size of one query/key head (positive, even).
    - ``layout``: required, ``"split_half"`` (HF, GPT-NeoX: pairs (i, i + r/2))
      or ``"interleaved"`` (GPT-J, Meta: pairs (2i, 2i + 1)). Weights trained
      for one layout give wrong scores, silently, under the other.
    - ``base``: the frequency base b, ``omega_i = b ** (-2i / rotary_dim)``.
    - ``rotary_dim``: the rotated prefix of each head (default ``head_dim``);
      the coordinates past it are never touched.
    - ``scaling``: a frequency rule: ``None`` for the plain rule, a
      transformers-style dict (``{"rope_type": "yarn", "factor": 4.0, ...}``),
      a rule object from ``pyrope.scaling`` or a resolved rule
      (see ``pyrope.scaling.resolve``).
    - ``mrope_section``: multimodal RoPE (Qwen2-VL): rotation pairs per
      position component (3 or 4 counts summing to rotary_dim/2); each token
      then has that many positions and each pair turns by its component's.
      ``mrope_interleaved``: assign pairs round-robin (Qwen3-VL) instead of in
      order. See ``pyrope._engine.sections`` and :meth:`apply` for positions.

    ``Rope.from_hf_config`` builds one from a model's ``config.json``;
    ``rope.contract()`` states what it computes, ``rope.fingerprint`` hashes
    that, and ``Rope.from_contract`` rebuilds the identical rope.
    """

    __slots__ = ("_head_dim", "_rotary_dim", "_layout", "_base", "_inv_freq",
                 "_attention_factor", "_resolved", "_fingerprint", "_tables", "_tables64", "_plan_key", "_plan_tag",
                 "_mrope_section", "_mrope_interleaved", "_pair_component",
                 "_softmax_scale_factor", "_layout_source")

    def __init__(self, head_dim, *, layout=_MISSING, base=10000.0, rotary_dim=None, scaling=None,
                 mrope_section=None, mrope_interleaved=False):
        if layout is _MISSING:
            raise TypeError(
                "layout is required: pass layout='split_half' (HF, GPT-NeoX) or "
                "layout='interleaved' (GPT-J, Meta); mixing them up corrupts scores silently")
        head_dim = as_even_dim("head_dim", head_dim)
        layout = as_layout(layout)
        base = as_base(base)
        rotary_dim = head_dim if rotary_dim is None else as_even_dim("rotary_dim", rotary_dim)
        if rotary_dim > head_dim:
            raise ValueError(f"rotary_dim must be at most head_dim ({head_dim}), got {rotary_dim}")
        resolved = resolve(scaling, head_dim=head_dim, rotary_dim=rotary_dim, base=base)
        inv_freq = resolved.inv_freq  # Resolved holds it float64, C-contiguous, read-only
        self._head_dim = head_dim
        self._rotary_dim = 2 * inv_freq.shape[0]
        self._layout = layout
        self._base = base
        self._inv_freq = inv_freq
        self._attention_factor = float(resolved.attention_factor)
        self._resolved = resolved
        self._fingerprint = None
        if mrope_section is None:
            if as_bool("mrope_interleaved", mrope_interleaved):
                raise ValueError("mrope_interleaved=True needs mrope_section (pairs per position component)")
            self._mrope_section, self._mrope_interleaved, self._pair_component = None, False, None
        else:
            section, comp = pair_components(mrope_section, mrope_interleaved, inv_freq.shape[0])
            self._mrope_section, self._mrope_interleaved = section, bool(mrope_interleaved)
            self._pair_component = comp
        self._tables = TableCache(inv_freq, self._attention_factor)  # float32 rows served so far
        self._tables64 = None  # float64 rows for float64 arrays, made on first use (_rows_for)
        self._plan_key = (layout, self._rotary_dim, head_dim)  # what plans of this rope depend on
        self._plan_tag = _plan.plan_tag(self._plan_key)        # the same, as memo keys hold it
        self._recorded(1.0, "argument")   # from_hf_config, from_contract and unpickling record their own

    @classmethod
    def from_hf_config(cls, config, *, layout=None, seq_len=None, layer_type=None):
        """The Rope of a transformers model config.

        ``config``: a dict, a path to ``config.json`` (or its folder), or a
        transformers config object; both the transformers-4 (``rope_scaling``)
        and transformers-5 (``rope_parameters``) styles are read.
        ``layout``: ``None`` (default) reads it from the config: the config's
        ``rope_interleave``, else its ``model_type`` (the families whose
        transformers code rotates adjacent pairs of HF weights are
        ``"interleaved"``), else ``"split_half"``; ``rope.layout_source`` says
        which. An explicit layout contradicting ``rope_interleave`` raises
        ``ValueError``. ``seq_len``: the length the frequencies are for, for
        dynamic NTK and LongRoPE, whose frequencies depend on it (``None``:
        those of the original window). For LongRoPE that is the call's largest
        position + 1. transformers' dynamic NTK is stateful: each rotary module
        keeps the longest length it has seen until a call is shorter than
        ``max_position_embeddings``, so to get transformers' frequencies pass
        that kept length, not the call's own:
        ``pyrope.scaling.dynamic_seq_len`` tracks it. ``layer_type``: the entry of a
        per-layer-type ``rope_parameters``. DeepSeek-style (MLA) configs give the
        rope of the ``qk_rope_head_dim`` slice, and ``rope.softmax_scale_factor``.
        See ``pyrope.config`` (and ``pyrope.config.layer_ropes`` for every layer).
        """
        return cls._from_arguments(hf_rope_arguments(config, layout=layout, seq_len=seq_len,
                                                     layer_type=layer_type))

    @classmethod
    def _from_arguments(cls, arguments):
        """The Rope of a config reader's ``RopeArguments``: built from its keyword
        arguments, with the two facts a Rope records beside them."""
        rope = cls(**arguments.kwargs)
        rope._recorded(float(arguments.softmax_scale_factor), arguments.layout_source)
        return rope

    def _recorded(self, softmax_scale_factor, layout_source):
        """Record the two facts a Rope keeps beside its position function (see
        :attr:`softmax_scale_factor`, :attr:`layout_source`)."""
        self._softmax_scale_factor = softmax_scale_factor
        self._layout_source = layout_source

    @classmethod
    def from_gguf(cls, path, *, layer=None, seq_len=None, layout=None):
        """The Rope of a llama.cpp GGUF file, from its metadata (and rope tensors).

        Needs the ``gguf`` package (``pip install gguf``); without it,
        ``ImportError`` names the extra. The layout is the pairing of the q/k
        tensors as stored in the file, from the architecture as llama.cpp runs
        it (``interleaved`` for ``llama``: its converter permutes the weights);
        ``layout=`` overrides it. ``layer``: a layer index, for files whose
        sliding-window or per-layer metadata differ by layer; ``seq_len``: as in
        :meth:`from_hf_config` (LongRoPE). See ``pyrope.gguf``. Every refusal names
        the file.
        """
        from .gguf import rope_from_gguf
        return rope_from_gguf(cls, path, layer=layer, seq_len=seq_len, layout=layout)

    @classmethod
    def from_contract(cls, contract):
        """Rebuild the Rope a contract describes (``rope.contract()``, possibly via JSON).

        The frequencies and attention factor are the contract's, bit for bit;
        the result has the same fingerprint. Raises ``ValueError`` naming the
        key of a malformed contract.
        """
        layout, head_dim, resolved = resolved_from_contract(contract)

        def checked(key, check, *args):  # what a contract may hold but a Rope cannot take
            try:
                return check(*args)
            except RopeError as exc:
                raise type(exc)(f"contract: {key!r}: {exc}") from None

        checked("layout", as_layout, layout)
        checked("head_dim", as_even_dim, "head_dim", head_dim)
        # informational: inv_freq is taken as is
        base = checked("params.base", as_base, resolved.params.get("base", 10000.0))
        section, interleaved = sections_from_contract(contract)
        if section is not None:
            checked("mrope_section", pair_components, section, interleaved, resolved.rotary_dim // 2)
        rope = cls(head_dim, layout=layout, base=base, rotary_dim=resolved.rotary_dim, scaling=resolved,
                   mrope_section=section, mrope_interleaved=interleaved)
        rope._recorded(*config_facts_from_contract(contract))
        return rope

    def contract(self):
        """JSON-serialisable dict of everything that defines this position function.

        Keys: format, layout, head_dim, rotary_dim, inv_freq (float.hex strings,
        exact), attention_factor (float.hex), rule, params, original_window,
        target_window, softmax_scale_factor (float.hex), layout_source
        (informational, outside the fingerprint). See ``pyrope.contract``.
        """
        contract = make_contract(layout=self._layout, head_dim=self._head_dim, resolved=self._resolved,
                                 mrope_section=self._mrope_section, mrope_interleaved=self._mrope_interleaved)
        return with_config_facts(contract, softmax_scale_factor=self._softmax_scale_factor,
                                 layout_source=self._layout_source)

    def __reduce__(self):
        """Pickled (and copied) by contract: what the rope computes, not the module
        paths and slots that hold it, so a pickle outlives a reorganisation of
        pyrope's internals. Rows served so far are not kept (they are rebuilt on
        demand, bit for bit); ``base`` is informational in a contract, so it
        travels beside it."""
        return (type(self).from_contract, (self.contract(),), {"base": self._base})

    def __setstate__(self, state):
        """The state :meth:`__reduce__` gives (``{"base": ...}``), or that of a
        pickle made by pyrope 0.2.0 or older, which pickled every slot (``(None,
        {slot: value})``): the rope is built again from what those slots define."""
        if isinstance(state, dict):
            self._base = state["base"]
            return
        slots = state[1]
        self.__init__(slots["_head_dim"], layout=slots["_layout"], base=slots["_base"],
                      rotary_dim=slots["_resolved"].rotary_dim, scaling=slots["_resolved"],
                      mrope_section=slots["_mrope_section"], mrope_interleaved=slots["_mrope_interleaved"])
        self._recorded(slots["_softmax_scale_factor"], slots["_layout_source"])

    @property
    def fingerprint(self):
        """SHA-256 hex digest of the contract's canonical form: equal exactly when
        two ropes compute the same position function (cached keys may be shared)."""
        if self._fingerprint is None:
            self._fingerprint = _fingerprint(self.contract())
        return self._fingerprint

    # ---- the contract ------------------------------------------------------

    head_dim = property(lambda self: self._head_dim, doc="Size of one head.")
    rotary_dim = property(lambda self: self._rotary_dim, doc="Rotated coordinates per head.")
    layout = property(lambda self: self._layout, doc="'split_half' or 'interleaved'.")
    layout_source = property(
        lambda self: self._layout_source,
        doc="Where the layout came from: 'argument', or (from_hf_config) 'rope_interleave', 'model_type', "
            "'default'.")
    softmax_scale_factor = property(
        lambda self: self._softmax_scale_factor,
        doc="Multiplier of the backend's 1/sqrt(d) softmax scale (DeepSeek YaRN: mscale(factor, "
            "mscale_all_dim)**2; 1.0 for every other model).")
    base = property(lambda self: self._base, doc="The frequency base given at construction.")
    inv_freq = property(lambda self: self._inv_freq,
                        doc="float64 [rotary_dim // 2] angular frequencies (read-only).")
    attention_factor = property(lambda self: self._attention_factor,
                                doc="Factor multiplying cos and sin (1.0 without scaling).")
    @property
    def resolved(self):
        """The resolved frequency rule this rope computes (a :class:`pyrope.scaling.Resolved`:
        ``inv_freq``, ``attention_factor``, ``rule``, ``params``, the windows), for tools
        that report or plot it. A copy: changing its ``params`` leaves the rope as it is."""
        r = self._resolved
        return dataclasses.replace(r, params=copy.deepcopy(r.params))

    mrope_section = property(lambda self: self._mrope_section,
                             doc="Rotation pairs per position component (tuple), or None.")
    mrope_interleaved = property(lambda self: self._mrope_interleaved,
                                 doc="Sections assigned round-robin over the pairs (Qwen3-VL).")

    def __repr__(self):
        sections = "" if self._mrope_section is None else (
            f", mrope_section={list(self._mrope_section)}, mrope_interleaved={self._mrope_interleaved}")
        return (f"Rope(head_dim={self._head_dim}, layout={self._layout!r}, base={self._base!r}, "
                f"rotary_dim={self._rotary_dim}, rule={self._resolved.rule!r}, "
                f"attention_factor={self._attention_factor!r}{sections})")

    # ---- tables ------------------------------------------------------------

    def cos_sin(self, positions, dtype=np.float32):
        """``(cos, sin)`` tables for integer ``positions``.

        Shape ``positions.shape + (rotary_dim // 2,)``; entry ``[..., i]`` is
        ``attention_factor * cos(position * inv_freq[i])`` (and sin), with the
        angle taken as the exact product. ``dtype`` float32 (default): correctly
        rounded at any position up to 2**31 - 1; float64: within 4 ulp
        (docs/ACCURACY.md). No duplicated halves: layouts share tables.
        A sectioned rope (``mrope_section``) takes positions ``[k, ...]`` (any
        array whose first axis has the k components) and returns shape
        ``positions.shape[1:] + (rotary_dim // 2,)``, entry ``i`` at the
        position of pair ``i``'s component; positions with another first axis
        mean the same position on every component.
        Tensor or DLPack ``positions`` (a torch int tensor) give tables of
        their type (``dtype`` may then be ``torch.float32``/``torch.float64``).
        """
        if type(positions) is not np.ndarray:
            if _tracing():   # torch.compile / torch.export: the custom op (pyrope._interop.torch_ops)
                from ._interop import torch_ops
                return torch_ops.traced_cos_sin(self, positions, dtype)
            if _COS_SIN.foreign((self, positions, dtype)):
                return _COS_SIN.convert(Rope.cos_sin, (self, positions, dtype))
        kind = table_dtype(dtype)
        pos = positions_array("positions", positions)
        sectioned = self._mrope_section is not None and pos.ndim >= 2 and pos.shape[0] == len(self._mrope_section)
        # Large tables first (untouched memory costs nothing): positions of any
        # shape are refused at once if their tables cannot exist, before a
        # value is read. A few rows (a decode step's) are made as they are filled.
        tables = None
        if pos.size > _SMALL_TABLE:
            try:
                tables = _engine_tables.empty_tables(pos.size, self._rotary_dim // 2, kind)
            except (MemoryError, builtins.ValueError):
                raise too_large("positions", (pos.size, self._rotary_dim // 2), kind,
                                "the cos and sin tables") from None
        cos, sin = self._table_rows(pos, kind, tables)
        half = self._rotary_dim // 2
        if sectioned:  # entry i from the row of pair i's component
            k = pos.shape[0]
            pick = (self._pair_component[None, :], np.arange(cos.shape[0] // k)[:, None], np.arange(half)[None, :])
            cos, sin = cos.reshape(k, -1, half)[pick], sin.reshape(k, -1, half)[pick]
            return cos.reshape(pos.shape[1:] + (half,)), sin.reshape(pos.shape[1:] + (half,))
        shape = pos.shape + (half,)
        return cos.reshape(shape), sin.reshape(shape)

    def _table_rows(self, pos, kind, tables=None):
        """``(cos, sin)``, ``[pos.size, rotary_dim/2]`` (``tables`` filled, or new
        arrays), the rows of integer positions ``pos`` (checked here): copied from the cached rows
        when the positions' span fits the cache (as :meth:`apply` serves them;
        rows are a pure function of the position, so the bits are those computed
        afresh), else computed for these positions. A decode step's few
        positions then cost a copy, not exact cos/sin."""
        if not pos.size:   # (tables are reserved only for many positions)
            return _engine_tables.empty_tables(0, self._rotary_dim // 2, kind)
        lo, hi = position_bounds("positions", pos)
        flat = pos.reshape(-1)
        if flat.dtype != np.int64 or not flat.flags.c_contiguous:
            flat = np.ascontiguousarray(flat, dtype=np.int64)
        window = self._rows_for(kind).lookup(lo, hi + 1, "Rope.cos_sin(positions)", flat.size)
        if window is not None:
            rows = flat - window.start
            if tables is None:
                return window.cos[rows], window.sin[rows]
            np.take(window.cos, rows, axis=0, out=tables[0])
            np.take(window.sin, rows, axis=0, out=tables[1])
            return tables
        return _engine_tables.cos_sin_table(flat, self._inv_freq, self._attention_factor, kind,
                                            where="Rope.cos_sin(positions)", tables=tables)

    def _token_positions(self, positions, batch_shape, n_seq, materialize=True):
        """``(int64 positions for C, sections)``: ``[B or 1, seq]`` and None, or for a
        sectioned rope given ``[k, seq]``/``[k, *batch, seq]``: ``[k, B or 1, seq]``
        and ``(k, pair -> component map)``. Plain positions on a sectioned rope
        mean the same position on every component, which one row per token is.
        ``materialize`` False: positions checked only (None for them)."""
        if self._mrope_section is not None:
            k = len(self._mrope_section)
            pos = positions_array("positions", positions)
            if is_sectioned(pos, k, batch_shape):
                return (_plan.section_positions(pos, k, batch_shape, n_seq, materialize),
                        (k, self._pair_component))
        return _plan.positions_2d(positions, batch_shape, n_seq, materialize), None

    def _rows_for(self, dtype):
        """The ``TableCache`` serving arrays of ``dtype``: float64 rows for
        float64 (so float64 data is rotated at float64 accuracy), float32 rows
        for the rest."""
        if dtype != np.float64:
            return self._tables
        tables = self._tables64
        if tables is None:  # a race makes two, one is kept: rows are a pure function
            tables = self._tables64 = TableCache(self._inv_freq, self._attention_factor, np.float64)
        return tables

    def _angles_for(self, positions, offset, n_seq, angles="auto", dtype=np.float32):
        """Angles for one call on arrays of ``dtype``: ``(template, c_positions,
        keep)``: a ``rope_angles`` template (cached rows, rows built for this
        call, or on the fly), the positions to hand to C (None: ``offset + s``),
        and the arrays the template points into. Rows are float64 for float64
        arrays, float32 otherwise (the kernel's arithmetic type).

        ``auto`` and ``table`` use the Rope's cached rows when the positions
        span at most the cache bound; wider spans are computed on the fly
        (``auto``, when rotary_dim/2 fits the kernel's on-the-fly row) or get
        rows built for this call only."""
        tables = self._rows_for(dtype)
        otf_ok = self._rotary_dim // 2 <= _binding.MAX_OTF_HALF
        if angles == "on_the_fly":
            if not otf_ok:
                raise ValueError(f"angles='on_the_fly' needs rotary_dim <= {2 * _binding.MAX_OTF_HALF}, "
                                 f"got rotary_dim={self._rotary_dim}; use angles='auto' or 'table'")
            return tables.on_the_fly, positions, None
        if positions is None:
            lo, hi = offset, offset + n_seq
        else:
            lo, hi = int(positions.min()), int(positions.max()) + 1
        window = tables.lookup(lo, hi, "offset" if positions is None else "positions",
                               n_seq if positions is None else positions.size)
        if window is not None:
            return window.angles, positions, window
        if angles == "auto" and otf_ok:
            return tables.on_the_fly, positions, None
        if positions is None:
            cos, sin = _engine_tables.cos_sin_range(offset, n_seq, self._inv_freq, self._attention_factor,
                                             where="offset", dtype=tables.dtype)
            return tables.angles_over(cos, sin, offset), None, (cos, sin)
        # Sparse positions (packed sequences far apart): one row per token.
        flat = np.ascontiguousarray(positions.reshape(-1))
        cos, sin = _engine_tables.cos_sin_table(flat, self._inv_freq, self._attention_factor, tables.dtype,
                                         where="positions")
        rows = np.arange(flat.size, dtype=np.int64).reshape(positions.shape)
        return tables.angles_over(cos, sin, 0), rows, (cos, sin)

    # ---- rotation ----------------------------------------------------------

    def apply(self, x, positions=None, *, offset=0, seq_axis=-3, out=None, inverse=False,
              angles="auto", norm=None):
        """Rotate query or key vectors by their positions.

        - ``x``: ndarray ``[*batch, seq, heads, head_dim]`` (``seq_axis=-3``,
          the default; ``[seq, heads, head_dim]`` has no batch) or
          ``[*batch, heads, seq, head_dim]`` (``seq_axis=-2``). Any strides.
          dtype float32, float16, bfloat16 (``ml_dtypes.bfloat16``) or float64;
          the result has x's dtype. float16/bfloat16 are computed in float32
          and rounded to nearest even once; float64 is computed in float64
          with float64 cos/sin rows (within a few float64 ulps, docs/ACCURACY.md).
        - ``positions``: ``None`` for ``offset + arange(seq)`` (decode with a KV
          cache passes ``offset=`` the cache length), or integer positions of
          shape ``[seq]`` or ``[*batch, seq]`` (left padding, packed sequences).
          A sectioned rope (``mrope_section``) also takes ``[k, seq]`` or
          ``[k, *batch, seq]``: k positions per token (text tokens have k equal
          ones; plain positions and ``offset=`` mean exactly that). Positions
          ``[k, seq]`` that fit a batch of k sequences are read as plain.
        - ``out``: ``None`` returns a new array; ``out=x`` rotates in place;
          another array of x's shape and dtype receives the result, e.g. a
          slot of a KV cache (``out=cache[:, pos:pos+1]``), written directly
          (docs/BACKENDS.md; :meth:`prepare` plans such a call once).
        - ``inverse``: rotate by minus the angle (undoes ``apply``).
        - ``angles``: where cos/sin come from. ``"auto"`` (default) uses the
          float32 rows this Rope keeps for the positions it has served (grown
          on demand, at most 32 MiB) and computes rows on the fly, token by
          token inside the kernel, when the positions span more than that;
          ``"table"`` always uses rows from a table (cached, or built for this
          call); ``"on_the_fly"`` never builds or reads a table. All three give
          bit-identical results.
        - ``norm``: a :class:`pyrope.RMSNorm` applied to each head (or each
          token's heads) before the rotation, in the same pass (QK-norm:
          Qwen3, Gemma 3, OLMo 2). Every coordinate is normalised, the
          rotary ones are then rotated; computed in float64, rounded once to
          float32 (float64 for float64 data) before the rotation
          (``pyrope.norm``). Not differentiable.

        Returns the rotated array (``out`` when given). Coordinates past
        ``rotary_dim`` are copied unchanged. Large calls run on up to
        ``pyrope.get_num_threads()`` threads with identical results. Raises
        ``TypeError``/``ValueError`` naming the argument before anything is
        written. An interrupt (Ctrl-C) during a call leaves what the caller
        sees (``out``, ``x`` in place) all rotated or all untouched.

        Torch tensors and DLPack objects: ``x``, ``out`` and ``positions`` may
        be CPU torch tensors (float32, float16, bfloat16, float64; positions
        any integer dtype) or any object with ``__dlpack__`` in CPU memory,
        viewed without a copy: ``out=x`` rotates the tensor's own storage, a
        new result is a tensor of x's type (``pyrope._interop.views`` says how other
        DLPack types come back). A tensor on another device, or of another
        dtype, is a ``TypeError`` naming it. A tensor that requires grad (grad
        enabled) is rotated differentiably: backward is ``apply(grad,
        inverse=not inverse)`` at the same positions, the exact adjoint; in
        place only on a tensor that is not a leaf (torch's rule), never into
        another ``out`` tensor (``ValueError`` naming ``out``).
        """
        if inverse is not False and inverse is not True:
            inverse = as_bool("inverse", inverse)
        # The direct path (see "the direct path" below): a memo hit, then the
        # launcher. -3.0 == -3, so only an int seq_axis may look a plan up.
        if ((angles is _AUTO or type(angles) is str and angles == _AUTO) and type(x) is _ndarray
                and type(offset) is int and type(seq_axis) is int and (norm is None or type(norm) is RMSNorm)
                and (positions is None or type(positions) is _ndarray)):   # tensors cross the edge first
            if out is x:
                mark = None
            elif out is None:
                mark = _FRESH
            elif type(out) is _ndarray and out.dtype is x.dtype and out.shape == x.shape and not may_share(x, out):
                mark = out.strides
            else:
                mark = GENERAL
            if mark is GENERAL:
                key = None
            elif norm is None:
                key = _direct_key(self._plan_tag, seq_axis, inverse, x, mark)
                stages = data = None
            elif x.ndim >= 3 and (seq_axis == -3 or seq_axis == -2):
                # with its norm: the same memo, the norm's kind and eps in the key, its weights per call
                stage = norm.stage("norm", x.dtype, self._head_dim, x.shape[-2] if seq_axis == -3 else x.shape[-3])
                key = (_direct_key(self._plan_tag, seq_axis, inverse, x, mark), stage[0], stage[2])
                stages, data = (stage,), ((_weight_pointer(stage), None),)
            else:
                key = None
            if key is not None:
                call = _plan.CALLS.get(key, _UNPLANNED)
                if call is _UNPLANNED:
                    call = _plan.direct_call(key, (x,), seq_axis, inverse, self._plan_key, (out,), stages)
                if call is not None:
                    result = _plan.fresh_result(x) if out is None else out
                    rows = self._rows_for(np.float64).window if call.wide else self._tables.window
                    if rows is not None and call.launch_one(x, result, rows.angles, positions, offset, "Rope.apply",
                                                            data):
                        return result
        elif (type(x) is _tensor_direct.TENSOR and positions is None and norm is None and (out is x or out is None)
              and type(offset) is int and type(seq_axis) is int and (angles is _AUTO or angles == _AUTO)):
            result = _tensor_direct.apply(self, x, offset, seq_axis, out, inverse)   # a decode call on a tensor
            if result is not None:
                return result
        return _general(self, x, positions, offset, seq_axis, out, inverse, angles, norm)

    def apply_qk(self, q, k, positions=None, *, offset=0, seq_axis=-3, out=None, angles="auto", q_norm=None,
                 k_norm=None):
        """Rotate queries and keys at the same positions; returns ``(q_rot, k_rot)``.

        ``q`` and ``k`` share dtype, batch and sequence shape and may differ in
        head count (grouped-query attention). ``out`` is ``None`` or a pair
        ``(q_out, k_out)``; ``out=(q, k)`` rotates both in place. One pass:
        each token's cos/sin row is read once for both. Values are never
        rotated: pass only q and k. ``q_norm``, ``k_norm``: a
        :class:`pyrope.RMSNorm` each, or None, applied before the rotation in
        the same pass (see ``norm`` in :meth:`apply`). See :meth:`apply` for
        the rest, torch tensors and autograd included.
        """
        # The direct path, as in apply.
        if ((angles is _AUTO or type(angles) is str and angles == _AUTO) and type(q) is _ndarray
                and type(k) is _ndarray and type(offset) is int and q_norm is None and k_norm is None
                and type(seq_axis) is int and k.dtype is q.dtype
                and (positions is None or type(positions) is _ndarray)):
            if out is None:
                qo = ko = None
                marks = (_FRESH, _FRESH)
            elif type(out) is tuple and len(out) == 2:
                qo, ko = out
                marks = (None, None) if qo is q and ko is k else qk_marks(q, k, qo, ko)
            else:
                marks = None
            if marks is not None and not may_share(q, k):
                key = _direct_key(self._plan_tag, seq_axis, False, q, marks[0], k, marks[1])
                call = _plan.CALLS.get(key, _UNPLANNED)
                if call is _UNPLANNED:
                    call = _plan.direct_call(key, (q, k), seq_axis, False, self._plan_key, (qo, ko))
                if call is not None:
                    results = (_plan.fresh_result(q) if qo is None else qo,
                               _plan.fresh_result(k) if ko is None else ko)
                    rows = self._rows_for(np.float64).window if call.wide else self._tables.window
                    if rows is not None and call.launch((q, k), results, rows.angles, positions, offset,
                                                        "Rope.apply_qk"):
                        return results
        return _general_qk(self, q, k, positions, offset, seq_axis, out, angles, q_norm, k_norm)

    # ---- prepared calls (a backend's decode loop) ------------------------------

    def prepare(self, x, out=None, *, seq_axis=-3, inverse=False):
        """A :class:`PreparedRotation` for arrays laid out like ``x`` and ``out``.

        ``x`` and ``out`` are examples: the prepared call takes arrays of
        exactly their shapes, strides and dtype, e.g. ``out=cache[:, 0:1]`` for
        a decode step that writes into successive slots ``cache[:, pos:pos+1]``
        of a KV cache (every slot has the same strides). ``out``: ``None``
        (each call returns a new array), ``x`` itself (in place; each call
        passes ``out=x``) or an array of x's shape and dtype. ``seq_axis`` and
        ``inverse`` as in :meth:`apply`. The plan is made here, once: each call
        then checks its arrays against it and fills in pointers and positions
        (docs/BACKENDS.md).

        Raises ``TypeError``/``ValueError`` naming the argument for what
        :meth:`apply` would refuse, and for layouts the kernel cannot address
        without a copy (a last axis that is not contiguous, strides that are
        not whole elements, batch dims that do not merge).

        Torch tensors and DLPack objects are prepared by their array views and
        may be passed to the prepared call as in :meth:`apply` (their views
        must match the plan; tensors that require grad are differentiated,
        backward through :meth:`apply`).
        """
        inverse = as_bool("inverse", inverse)
        if _PREPARE.foreign((self, x, out, seq_axis, inverse)):   # tensors: planned on their array views
            return _PREPARE.convert(_prepare, (self, x, out, seq_axis, inverse))
        Job(self, None, 0, seq_axis).add("x", x, out, "out")
        return PreparedApply(self, (x,), (out,), int(seq_axis), inverse, ("x",), ("out",))

    def prepare_qk(self, q, k, out=None, *, seq_axis=-3):
        """A :class:`PreparedRotation` of q and k together (see :meth:`prepare`):
        arrays laid out like ``q`` and ``k``, written to ``out`` = ``None`` (new
        arrays) or a pair ``(q_out, k_out)``, each the array itself (in place)
        or an array of its shape and dtype, e.g. ``out=(q, k_cache[:, 0:1])``."""
        if _PREPARE_QK.foreign((self, q, k, out, seq_axis)):   # tensors: planned on their array views
            return _PREPARE_QK.convert(_prepare_qk, (self, q, k, out, seq_axis))
        q_out, k_out = out_pair(out)
        job = Job(self, None, 0, seq_axis)
        job.add("q", q, q_out, "out[0]")
        as_float_array("k", k, (q.dtype,))
        job.add("k", k, k_out, "out[1]")
        if not _plan.same_tokens(q, k, job.seq_axis):
            raise ValueError(f"q and k must share batch and sequence dims, got shapes {q.shape} and {k.shape}")
        return PreparedApplyQK(self, (q, k), (q_out, k_out), job.seq_axis, False, ("q", "k"),
                                ("out[0]", "out[1]"))

    # ---- the paged KV cache ------------------------------------------------------

    def cache_write(self, k, v, k_cache, v_cache, slot_mapping, *, positions=None, offset=0, norm=None,
                    layout="NHD", k_scale=None, v_scale=None):
        """Rotate keys at their positions and write them, with values, into a paged cache, in one pass.

        vLLM's ``reshape_and_cache`` with the rotation (and QK-norm) fused in:

        - ``k``, ``v``: ``[tokens, kv_heads, head_dim]`` or ``[*batch, seq,
          kv_heads, head_dim]``, one dtype (float32, float16, bfloat16,
          float64). ``k`` is normalised by ``norm`` (a :class:`pyrope.RMSNorm`,
          optional), rotated, and stored; ``v`` is stored as it is, never
          rotated nor normalised. ``v`` and ``v_cache`` may both be None (keys
          only, e.g. the rope part of an MLA cache).
        - ``k_cache``, ``v_cache``: ``[num_blocks, block_size, kv_heads,
          head_dim]`` (``layout="NHD"``) or ``[num_blocks, kv_heads,
          block_size, head_dim]`` (``"HND"``), written in place: any storage
          type (float64 data only into float64 or float32), rounded once from
          the computed value; a contiguous last axis. Or quantised (float32
          arithmetic, one rounding after the rotation; the formulas in
          docs/ACCURACY.md, "Quantised caches"): ``int8`` with a float32
          scale per slot and head that the call writes into ``k_scale``/
          ``v_scale`` (arrays of the cache's token shape, ``[num_blocks,
          block_size, kv_heads]`` NHD); ``ml_dtypes.float8_e4m3fn`` (torch
          ``float8_e4m3fn``) with a static scale per cache (``k_scale``/
          ``v_scale`` numbers, default 1.0); ggml q8_0, the last axis
          ``head_dim // 32`` blocks of :data:`pyrope.Q8_0` (or their bytes
          as uint8), scales in the blocks (``k_scale`` None).
        - ``slot_mapping``: integers of k's token shape (``[tokens]`` or
          ``[*batch, seq]``, int32 or int64): token t goes to slot
          ``slot_mapping[t]`` = block * block_size + offset in the block;
          -1 skips the token (padding). A slot is a place, not a position.
        - ``positions``, ``offset``: the keys' logical positions, as in
          :meth:`apply` (default ``offset + arange(seq)``).

        Returns ``(k_cache, v_cache)`` (a uint8 q8_0 cache as given). Refused before anything is written,
        with a ``TypeError``/``ValueError`` naming the argument: a slot out of
        range, a slot twice, caches of the wrong shape, dtype or layout, k or
        v overlapping a cache, the caches overlapping each other. Torch
        tensors (written in their own storage) and DLPack objects as in
        :meth:`apply`; not differentiable.
        """
        if (type(k) is _ndarray and type(k_cache) is _ndarray and type(slot_mapping) is _ndarray
                and (k_scale is None or type(k_scale) in _SCALE_TYPES)
                and (v_scale is None or type(v_scale) in _SCALE_TYPES)):
            # the decode step: the memoised write (the general path below decides the rest)
            if (k.flags.c_contiguous and type(offset) is int and (positions is None or type(positions) is _ndarray)
                    and (norm is None or type(norm) is RMSNorm)
                    and (v is None and v_cache is None or type(v) is _ndarray and v.flags.c_contiguous
                         and type(v_cache) is _ndarray)
                    and _paged.direct(self, k, v, k_cache, v_cache, slot_mapping, positions, offset, norm, layout,
                                      "Rope.cache_write", k_scale, v_scale)):
                return k_cache, v_cache
        if type(k) is not _ndarray and _tracing():   # the custom op (see apply)
            from ._interop import torch_ops
            return torch_ops.traced_cache_write(self, k, v, k_cache, v_cache, slot_mapping, positions, offset, norm,
                                                layout, k_scale, v_scale)
        if _CACHE_WRITE.foreign((self, k, v, k_cache, v_cache, slot_mapping, positions, offset, norm, layout,
                                   k_scale, v_scale)):
            return _CACHE_WRITE.convert(_cache_write, (self, k, v, k_cache, v_cache, slot_mapping, positions,
                                                       offset, norm, layout, k_scale, v_scale))
        return _paged.cache_write(self, k, v, k_cache, v_cache, slot_mapping, positions, offset,
                                  as_norm("norm", norm), layout, "Rope.cache_write", k_scale, v_scale)

    def shift_keys(self, k_cache, slot_mapping, from_positions, to_positions, *, layout="NHD", k_scale=None):
        """Move the keys stored at ``slot_mapping``'s slots from ``from_positions``
        to ``to_positions``, in place, in one pass (llama.cpp's K-shift after a
        context shift or a removed prefix). Returns ``k_cache``.

        Each key is read from its slot (a quantised one dequantised to
        float32), rotated by the exact difference ``to - from`` with attention
        factor 1 (the key carries the factor already), and stored back
        (requantised; an int8 head's scale in ``k_scale`` recomputed). A float
        cache gets the bits :func:`pyrope.cache.rerotate` gives the same keys.

        - ``k_cache``: a cache as :meth:`cache_write` takes it (float, int8,
          float8_e4m3fn, q8_0), ``layout`` "NHD" or "HND"; ``k_scale``: its
          int8 scales array or float8 static scale, as there.
        - ``slot_mapping``: ``[n]`` or ``[*batch, n]`` slots (-1: skipped),
          none twice; ``from_positions``, ``to_positions``: integers
          broadcasting to its shape, their difference within +-(2**31 - 1).

        Refused before anything is written (``TypeError``/``ValueError``
        naming the argument) as :meth:`cache_write` refuses, and for a
        sectioned (multimodal) rope, whose keys move by several components.
        docs/ACCURACY.md ("Shifting quantised keys") gives the error after
        repeated shifts of a quantised cache.
        """
        if type(k_cache) is not _ndarray and _tracing():   # the custom op (see apply)
            from ._interop import torch_ops
            return torch_ops.traced_shift_keys(self, k_cache, slot_mapping, from_positions, to_positions, layout,
                                               k_scale)
        return _shift.shift_keys(Rope, self, k_cache, slot_mapping, from_positions, to_positions, layout=layout,
                                 k_scale=k_scale)

    # ---- cached keys (pyrope.cache) ------------------------------------------

    def rerotate(self, k, from_positions, to_positions, *, seq_axis=-3):
        """Move keys this rope rotated at ``from_positions`` to ``to_positions``,
        in place, in one pass (context shifting). Returns ``k``.

        Fixes this layer's cached keys only: see :func:`pyrope.cache.rerotate`.
        """
        if type(k) is not _ndarray and _tracing():   # the custom op (see apply)
            from ._interop import torch_ops
            return torch_ops.traced_rerotate(self, k, from_positions, to_positions, seq_axis)
        return _rekey.rerotate(Rope, self, k, from_positions, to_positions, seq_axis=seq_axis)

    def convert_keys(self, k, positions, to_rope, *, seq_axis=-3, out=None):
        """Re-express keys this rope rotated at ``positions`` under ``to_rope``'s
        frequency rule (dynamic NTK, LongRoPE short to long) without re-prefill.

        Fixes this layer's keys, not hidden states computed under the old rule:
        see :func:`pyrope.cache.convert_keys`.
        """
        return _rekey.convert_keys(Rope, self, k, positions, to_rope, seq_axis=seq_axis, out=out)


# ---- the edge: tensors and DLPack objects, viewed as arrays, re-enter the public call ----

def _apply(rope, x, positions, offset, seq_axis, out, inverse, angles, norm):
    return rope.apply(x, positions, offset=offset, seq_axis=seq_axis, out=out, inverse=inverse, angles=angles,
                      norm=norm)


def _apply_qk(rope, q, k, positions, offset, seq_axis, out, angles, q_norm, k_norm):
    return rope.apply_qk(q, k, positions, offset=offset, seq_axis=seq_axis, out=out, angles=angles, q_norm=q_norm,
                         k_norm=k_norm)


def _no_norm(where, *norms):
    """A rotation with a norm has no adjoint here: refuse tensors that require grad."""
    for name, norm in norms:
        if norm is not None:
            raise ValueError(f"{where} with {name}= is not differentiable, and a tensor requires grad: call it "
                             f"under torch.no_grad(), or normalise with torch and rotate without {name}")


def _apply_adjoint(args):
    """The rotation's adjoint is the rotation with ``inverse`` flipped."""
    _no_norm("Rope.apply", ("norm", args["norm"]))
    rope = args["rope"]
    return lambda g: rope.apply(g, args["positions"], offset=args["offset"], seq_axis=args["seq_axis"],
                                inverse=not args["inverse"], angles=args["angles"])


def _qk_adjoint(args):
    """q and k turn by the same angles: each one's adjoint is the inverse rotation."""
    _no_norm("Rope.apply_qk", ("q_norm", args["q_norm"]), ("k_norm", args["k_norm"]))
    rope = args["rope"]
    return lambda g: rope.apply(g, args["positions"], offset=args["offset"], seq_axis=args["seq_axis"],
                                inverse=True, angles=args["angles"])


_SCALE_TYPES = (np.ndarray, float, int)   # the scales the memoised write takes as they are


def _cache_write(rope, k, v, k_cache, v_cache, slot_mapping, positions, offset, norm, layout, k_scale, v_scale):
    return rope.cache_write(k, v, k_cache, v_cache, slot_mapping, positions=positions, offset=offset, norm=norm,
                            layout=layout, k_scale=k_scale, v_scale=v_scale)


def _prepare(rope, x, out, seq_axis, inverse):
    return rope.prepare(x, out, seq_axis=seq_axis, inverse=inverse)


def _prepare_qk(rope, q, k, out, seq_axis):
    return rope.prepare_qk(q, k, out, seq_axis=seq_axis)





_APPLY = Edge("Rope.apply", ("rope", "x", "positions", "offset", "seq_axis", "out", "inverse", "angles", "norm"),
              inputs=("x",), out="out", positions=("positions",), adjoint=_apply_adjoint)
_APPLY_QK = Edge("Rope.apply_qk", ("rope", "q", "k", "positions", "offset", "seq_axis", "out", "angles", "q_norm",
                                   "k_norm"),
                 inputs=("q", "k"), out="out", pair=True, positions=("positions",), adjoint=_qk_adjoint)
_COS_SIN = Edge("Rope.cos_sin", ("rope", "positions", "dtype"), positions=("positions",), dtypes=("dtype",),
                like="positions")
# data=False: caches may be int8, float8 or q8_0 bytes (the write checks every dtype itself)
_CACHE_WRITE = Edge("Rope.cache_write", ("rope", "k", "v", "k_cache", "v_cache", "slot_mapping", "positions",
                                         "offset", "norm", "layout", "k_scale", "v_scale"),
                     inputs=("k", "v", "k_cache", "v_cache", "k_scale", "v_scale"),
                     positions=("slot_mapping", "positions"), written=("k_cache", "v_cache", "k_scale", "v_scale"),
                     like="", data=False)
_PREPARE = Edge("Rope.prepare", ("rope", "x", "out", "seq_axis", "inverse"), inputs=("x",), out="out",
                examples=True)
_PREPARE_QK = Edge("Rope.prepare_qk", ("rope", "q", "k", "out", "seq_axis"), inputs=("q", "k"), out="out",
                   pair=True, examples=True)



def _general(rope, x, positions, offset, seq_axis, out, inverse, angles, norm=None):
    """``apply`` through the general path: any strides, overlaps, positions.
    Tensors and DLPack objects (which the direct path never takes) cross
    the edge here: viewed as arrays, they call ``apply`` again."""
    if type(x) is not _ndarray or (out is not None and type(out) is not _ndarray) or (
            positions is not None and type(positions) is not _ndarray):
        if _tracing():   # torch.compile / torch.export: the custom op, which tracing records
            from ._interop import torch_ops
            return torch_ops.traced_apply(rope, x, positions, offset, seq_axis, out, inverse, angles, norm)
        result = _APPLY.run(_apply, (rope, x, positions, offset, seq_axis, out, inverse, angles, norm))
        if result is not _PASS:
            return result
    job = Job(rope, positions, offset, seq_axis, angles)
    job.add("x", x, out, "out", as_norm("norm", norm))
    return job.run(inverse, "Rope.apply")[0]


def _general_qk(rope, q, k, positions, offset, seq_axis, out, angles, q_norm=None, k_norm=None):
    """``apply_qk`` through the general path (tensors: see :func:`_general`)."""
    if type(q) is _tensor_direct.TENSOR and positions is None and q_norm is None and k_norm is None \
            and type(offset) is int and type(seq_axis) is int and (angles is _AUTO or angles == _AUTO):
        result = _tensor_direct.apply_qk(rope, q, k, offset, seq_axis, out)   # a decode call on tensors
        if result is not None:
            return result
    if type(q) is not _ndarray and _tracing():
        from ._interop import torch_ops
        return torch_ops.traced_apply_qk(rope, q, k, positions, offset, seq_axis, out, angles, q_norm, k_norm)
    result = _APPLY_QK.run(_apply_qk, (rope, q, k, positions, offset, seq_axis, out, angles, q_norm, k_norm))
    if result is not _PASS:
        return result
    q_out, k_out = out_pair(out)
    job = Job(rope, positions, offset, seq_axis, angles)
    job.add("q", q, q_out, "out[0]", as_norm("q_norm", q_norm), "q_norm")
    as_float_array("k", k, (q.dtype,))
    job.add("k", k, k_out, "out[1]", as_norm("k_norm", k_norm), "k_norm")
    if not _plan.same_tokens(q, k, job.seq_axis):
        raise ValueError(f"q and k must share batch and sequence dims, got shapes {q.shape} and {k.shape}")
    return tuple(job.run(False, "Rope.apply_qk"))


_ndarray = np.ndarray
_weight_pointer = _stages.weight_pointer
_UNPLANNED = _plan.UNPLANNED
_FRESH = _plan.FRESH
_direct_key = _plan.direct_key
