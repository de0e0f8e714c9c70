// Shared by every facerun kernel (prepended to each module).

// The activations a step may end with: 0 none, 1 relu, 2 sigmoid, 3 clip [lo, hi], 4 leaky (alpha), 5 prelu (slope).
fn activate(v: f32, kind: u32, lo: f32, hi: f32, alpha: f32, slope: f32) -> f32 {
    switch kind {
        case 1u: { return max(v, 0.0); }
        case 2u: { return 1.0 / (1.0 + exp(-v)); }
        case 3u: { return min(max(v, lo), hi); }
        case 4u: { return select(v, v * alpha, v < 0.0); }
        case 5u: { return select(v, v * slope, v < 0.0); }
        default: { return v; }
    }
}

// The linear index of a one-thread-per-value kernel whose grid was folded into (x, y) rows of `row` workgroups.
fn flat_index(wid: vec3<u32>, lid: u32, row: u32) -> u32 {
    return (wid.y * row + wid.x) * 256u + lid;
}
