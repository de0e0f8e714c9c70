// out = act(a (op) b) with broadcasting: both operands are read through strides over out's (merged, at most
// 6-D) index, 0 on a broadcast dimension. op: OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW or OP_PRELU (b the slope).

struct Params {
    total: u32,
    row: u32,
#fields activation
    plane: u32,
    channels: u32,
    op: u32,
    shape: array<vec4<u32>, 2>,  // out's dims, innermost last, padded in front with 1
    sa: array<vec4<u32>, 2>,
    sb: array<vec4<u32>, 2>,
}

#bindings a, b, coef

#per_value main total
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 5; d >= 0; d--) {
        let size = p.shape[d / 4][d % 4];
        let c = rest % size;
        rest = rest / size;
        ia += c * p.sa[d / 4][d % 4];
        ib += c * p.sb[d / 4][d % 4];
    }
    let x = a[ia];
    let y = b[ib];
    var v: f32;
    switch p.op {
        case OP_ADD: { v = x + y; }
        case OP_SUB: { v = x - y; }
        case OP_MUL: { v = x * y; }
        case OP_DIV: { v = x / y; }
        case OP_POW: { v = power(x, y); }
        case OP_PRELU, default: { v = select(x, x * y, x < 0.0); }
    }
    var slope = 0.0;
    if (p.act == ACT_PRELU) {
        slope = coef[p.slope_at + (i / p.plane) % p.channels];
    }
    out[i] = activate(v, p.act, p.lo, p.hi, p.alpha, slope);
}
