// Shared by every facerun kernel (prepended to each module, after the constants kernels.py generates: the op codes
// ACT_*, OP_*, POOL_* and FLAT, the threads of a one-thread-per-value kernel). In the kernel sources, the lines
// `#bindings`, `#fields` and `#per_value` are the shared preambles (bindings, Params fields, the one-thread-per-value
// entry point with its index guard), which facerun/gpu/kernels.py writes out.

// The activation a step may end with: clip to [lo, hi], leaky with `alpha`, prelu with this channel's `slope`,
// hardsigmoid clamp(alpha * v + lo, 0, 1), hardswish v times that.
fn activate(v: f32, kind: u32, lo: f32, hi: f32, alpha: f32, slope: f32) -> f32 {
    switch kind {
        case ACT_RELU: { return max(v, 0.0); }
        case ACT_SIGMOID: { return 1.0 / (1.0 + exp(-v)); }
        case ACT_CLIP: { return min(max(v, lo), hi); }
        case ACT_LEAKY: { return select(v, v * alpha, v < 0.0); }
        case ACT_PRELU: { return select(v, v * slope, v < 0.0); }
        case ACT_EXP: { return exp(v); }
        case ACT_SQRT: { return sqrt(v); }
        case ACT_HARDSIGMOID: { return clamp(fma(alpha, v, lo), 0.0, 1.0); }
        case ACT_HARDSWISH: { return v * clamp(fma(alpha, v, lo), 0.0, 1.0); }
        case ACT_NONE, default: { return v; }
    }
}

// x to the power y as ONNX's Pow computes it: WGSL's pow is undefined for x < 0, so an integer y takes |x|'s power
// with the sign of x for odd y (and x * x, the common case, is exact).
fn power(x: f32, y: f32) -> f32 {
    if (y == 2.0) {
        return x * x;
    }
    if (y == 1.0) {
        return x;
    }
    if (y == 0.0) {
        return 1.0;
    }
    if (x >= 0.0) {
        return select(pow(x, y), select(0.0, bitcast<f32>(0x7f800000u), y < 0.0), x == 0.0);  // 0^-y: inf
    }
    if (y != floor(y)) {
        return bitcast<f32>(0x7fc00000u);  // NaN
    }
    let r = pow(-x, y);
    return select(r, -r, fract(y * 0.5) != 0.0);
}

// The linear index of a one-thread-per-value kernel whose grid was folded into (x, y) rows of `row` workgroups.
fn flat_index(wid: vec3<u32>, lid: u32, row: u32) -> u32 {
    return (wid.y * row + wid.x) * FLAT + lid;
}
