// The end of a convolution or fully connected step: + bias[co] + residual[i], then the activation.
// Expects the module's `p` (with has_bias, has_res, act, lo, hi, alpha, slope_at and the mask fields), `epi` (bias
// then prelu slopes) and `res` bindings.
// The mask (vh != 0: a photo smaller than the program's input, masking.py): an output position at or past row vh or
// column vw is 0, as the zero padding past the photo's own program would be, so the next layer reads what it would
// read there. Output i's position is (i / mask_p) % mask_ohw, mask_ow positions a row. A batch of photos of several
// sizes (mask_items != 0, an item's output elements): item n's photo is photos[2n] x photos[2n + 1] input pixels,
// and this output keeps its rows and columns over (vh, vw), the output's steps down from the input.

@group(0) @binding(7) var<storage, read> photos: array<u32>;

// The rows and columns of batch item n's output that its photo covers (the mask is on: p.vh != 0).
fn mask_limits(n: u32) -> vec2<u32> {
    if (p.mask_items == 0u) {
        return vec2<u32>(p.vh, p.vw);
    }
    return vec2<u32>(photos[2u * n] / p.vh, photos[2u * n + 1u] / p.vw);
}

fn finish(v0: f32, co: u32, i: u32) -> f32 {
    if (p.vh != 0u) {
        let pos = (i / p.mask_p) % p.mask_ohw;
        let keep = mask_limits(i / max(p.mask_items, 1u));
        if (pos / p.mask_ow >= keep.x || pos % p.mask_ow >= keep.y) {
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
