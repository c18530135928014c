"""What a contract must hold, computed without pyrope: its frequencies and attention
factor from the rule and parameters it names (tests/support/reference_rules.py, mpmath's
correctly rounded powers and logarithms), and its fingerprint from the canonical
form the contract module documents (the SHA-256 of sorted, compact JSON with
every float of ``params`` as ``float.hex``).

So a fingerprint in a test is never a string pinned from one machine's run: it
is recomputed here, from numbers that are the same on every machine."""

import hashlib
import json

import reference_rules as R


def independent_fingerprint(contract):
    """The documented canonical form, rebuilt here without pyrope's helpers (the
    windows of a default-rule contract and ``layout_source`` do not enter it;
    ``softmax_scale_factor`` does when it is not 1)."""
    def hexify(value):
        if isinstance(value, float):
            return value.hex()
        if isinstance(value, list):
            return [hexify(v) for v in value]
        if isinstance(value, dict):
            return {k: hexify(v) for k, v in value.items()}
        return value

    obj = {k: v for k, v in contract.items() if k not in ("softmax_scale_factor", "layout_source")}
    obj["params"] = hexify(contract["params"])
    obj["inv_freq"] = [float.fromhex(h).hex() for h in contract["inv_freq"]]
    obj["attention_factor"] = float.fromhex(contract["attention_factor"]).hex()
    if obj["rule"] == "default":
        obj["original_window"] = obj["target_window"] = None
    softmax = float.fromhex(contract.get("softmax_scale_factor", (1.0).hex()))
    if softmax != 1.0:
        obj["softmax_scale_factor"] = softmax.hex()
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def expected_numbers(contract):
    """``(inv_freq list, attention_factor)`` the contract's rule gives for its
    parameters, from the plain-Python rules.  An attention factor the rule took as
    given (not computed) is the contract's own."""
    rule, p = contract["rule"], contract["params"]
    d, head_dim, base = contract["rotary_dim"], contract["head_dim"], p.get("base")
    given = float.fromhex(contract["attention_factor"])
    if rule == "default":
        return R.default(d, base)
    if rule == "linear":
        return R.linear(d, base, p["factor"])
    if rule == "ntk":
        return R.ntk(d, base, p["factor"])
    if rule == "dynamic":
        if "alpha" in p:
            return R.default(d, R.ntk_base(d, base, p["alpha"]))
        return R.dynamic(d, base, p["factor"], p["max_position_embeddings"], p["seq_len"])
    if rule == "yarn":
        attention = given if p["attention_factor_from"] == "given" else None
        return R.yarn(d, base, p["factor"], p["original_max_position_embeddings"], p["beta_fast"], p["beta_slow"],
                      p["mscale"], p["mscale_all_dim"], attention, p["truncate"])
    if rule == "llama3":
        return R.llama3(d, base, p["factor"], p["low_freq_factor"], p["high_freq_factor"],
                        p["original_max_position_embeddings"])
    if rule == "longrope":
        inv, _ = R.freq_factors(d, base, p["ext_factors"])
        if p["attention_factor_from"] == "given":
            return inv, given
        _, attention = R.longrope(d, base, p["ext_factors"], p["ext_factors"], p["original_max_position_embeddings"],
                                  factor=p["factor"])
        return inv, attention
    if rule == "proportional":
        theta, _ = R.default(head_dim, base)  # exponents over the whole head
        return [t / p["factor"] if i < p["rotated_pairs"] else 0.0 for i, t in enumerate(theta)], 1.0
    if rule == "freq_factors":
        inv, _ = R.freq_factors(d, base, p["factors"])
        return inv, given
    raise AssertionError(f"no oracle for rule {rule!r}")
