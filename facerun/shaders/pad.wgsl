// Padding over a (at most 6-D) index: each output coordinate less `before` is the input coordinate, spread by the
// interior step (`value` between neighbours); outside the input, PAD_CONSTANT writes `value`, PAD_REFLECT reflects
// about the edge, PAD_EDGE repeats the edge, PAD_WRAP wraps around.

struct Params {
    total: u32,
    row: u32,
    mode: u32,
    value: f32,
    shape: array<vec4<u32>, 2>,  // out's dims, innermost last, padded in front with 1
    dims: array<vec4<i32>, 2>,  // x's dims (after spreading), likewise
    before: array<vec4<i32>, 2>,
    step: array<vec4<i32>, 2>,  // interior + 1
    src: array<vec4<u32>, 2>,  // x's strides
}

#bindings x

#per_value main total
    var rest = i;
    var si = 0u;
    var inside = true;
    for (var d = 5; d >= 0; d--) {
        let size = p.shape[d / 4][d % 4];
        let n = p.dims[d / 4][d % 4];
        let step = p.step[d / 4][d % 4];
        var c = i32(rest % size) - p.before[d / 4][d % 4];
        rest = rest / size;
        if (c < 0 || c >= n) {
            switch p.mode {
                case PAD_REFLECT: { c = select(c, -c, c < 0); c = select(c, 2 * (n - 1) - c, c >= n); }
                case PAD_EDGE: { c = clamp(c, 0, n - 1); }
                case PAD_WRAP: { c = ((c % n) + n) % n; }
                case PAD_CONSTANT, default: { inside = false; }
            }
        }
        if (c % step != 0) {
            inside = false;
        }
        si += u32(max(c, 0) / step) * p.src[d / 4][d % 4];
    }
    out[i] = select(p.value, x[si], inside);
}
