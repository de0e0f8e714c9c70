// The end of a convolution or fully connected step: + bias[co] + residual[i], then the activation.
// Expects the module's `p` (with has_bias, has_res, act, lo, hi, alpha, slope_at and the mask fields), `epi` (bias
// then prelu slopes) and `res` bindings.
// The mask (vh != 0: a photo smaller than the program's input, masking.py): an output position at or past row vh or
// column vw is 0, as the zero padding past the photo's own program would be, so the next layer reads what it would
// read there. Output i's position is (i / mask_p) % mask_ohw, mask_ow positions a row.
fn finish(v0: f32, co: u32, i: u32) -> f32 {
    if (p.vh != 0u) {
        let pos = (i / p.mask_p) % p.mask_ohw;
        if (pos / p.mask_ow >= p.vh || pos % p.mask_ow >= p.vw) {
            return 0.0;
        }
    }
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
