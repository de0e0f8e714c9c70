// The end of a convolution or fully connected step: + bias[co] + residual[i], then the activation.
// Expects the module's `p` (with has_bias, has_res, act, lo, hi, alpha, slope_at), `epi` (bias then prelu slopes)
// and `res` bindings.
fn finish(v0: f32, co: u32, i: u32) -> f32 {
    var v = v0;
    if (p.has_bias != 0u) {
        v += epi[co];
    }
    if (p.has_res != 0u) {
        v += res[i];
    }
    var slope = 0.0;
    if (p.act == ACT_PRELU) {
        slope = epi[p.slope_at + co];
    }
    return activate(v, p.act, p.lo, p.hi, p.alpha, slope);
}
