// Elementwise steps over NCHW: an activation alone (Unary), or a per-channel affine x * scale[c] + shift[c] before
// it (Affine: a batch norm that could not be folded). `coef` holds scale, shift (affine only) and prelu slopes.

struct Params {
    total: u32,
    row: u32,
#fields activation
    plane: u32,  // values per channel (product of the dims after the channel axis)
    channels: u32,
    affine: u32,
}

#bindings x, coef

#per_value main total
    let ch = (i / p.plane) % p.channels;
    var v = x[i];
    if (p.affine != 0u) {
        v = fma(v, coef[ch], coef[p.channels + ch]);
    }
    var slope = 0.0;
    if (p.act == ACT_PRELU) {
        slope = coef[p.slope_at + ch];
    }
    out[i] = activate(v, p.act, p.lo, p.hi, p.alpha, slope);
}
